"""Capability profiles: what a backend (of one ggml version) accepts, one TOML table each, read from
devices/*.toml by name or from any .toml file by path (`load`), and validated either way: unknown keys, missing
keys, wrong types, unknown rules and unknown op names are refused (InvalidOptionError naming key and file).
(A timing result is a `kzlab.analysis.profile.Profile`; this is a backend's `Capabilities`.)

A capability profile is data so that it can be read next to the C source it transcribes: which buffer kinds the
backend accepts (supports_buft), which ops it accepts and under which named rules (supports_op, see
rules.py), and whether it has an offload_op hook.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ggml import ggml as g

from kzlab.analysis.placement import defects as defect_rules
from kzlab.analysis.placement.rules import PATHS, RULES, Env, check, path_of
from kzlab.errors import InvalidOptionError

DIR = Path(__file__).parent / "devices"


@dataclass(frozen=True)
class BufferType:
    """A buffer type as the scheduler sees it: an identity (compared by sched->bufts[b] ==), a kind, is_host."""

    id: str
    kind: str
    host: bool


@dataclass
class Capabilities:
    """One backend's capabilities as ggml's supports_buft / supports_op / offload_op would answer."""

    name: str
    backend: str
    source: str
    buffer: BufferType
    accepts: list[str]
    offload_op: bool = False
    offload_min_batch: int = 32
    all: list = field(default_factory=list)
    default: str = "refuse"
    ops: dict[str, list] = field(default_factory=dict)
    #: the time model's numbers for this backend (kzlab.analysis.predict.parameters), its memory budget, and what a
    #: `kzlab calibrate` fit recorded; `path` is the file the profile was read from
    perf: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    #: per op, the rule that names the kernel path a node takes (`rules.PATHS`: a product's HMX or HVX kernel)
    paths: dict[str, list] = field(default_factory=dict)
    #: the backend's run-time options with their values (e.g. `hmx`: GGML_HEXAGON_USE_HMX), read by rules and paths
    options: dict[str, Any] = field(default_factory=dict)
    #: what-if changes made to the profile as read (`+SIN`, `-CONCAT`, `hmx=false`), in the order given
    changes: list[str] = field(default_factory=list)
    #: known defects (`[[defects]]`, kzlab.analysis.placement.defects): kernel paths that compute wrong values, or
    #: another function than the op's (an approximation the emulated decode judges)
    defects: list[dict] = field(default_factory=list)
    #: the device arithmetic's release (`kzlab.analysis.emulate`): which ggml kernels a node placed here computes as
    arith: str = ""

    @property
    def label(self) -> str:
        """The profile's name, with its what-if changes when it has any."""
        return self.name + (f" ({', '.join(self.changes)})" if self.changes else "")

    def supports_buft(self, buft: BufferType) -> bool:
        return buft.kind in self.accepts or ("host" in self.accepts and buft.host)

    def kernel_path(self, t, env: Env) -> str:
        """The kernel path a node this backend runs takes ("" where the profile names none)."""
        desc = g.ggml_op_desc(t).decode()
        if desc not in self.paths:
            return ""
        return path_of(self.paths[desc], t, _OptionsEnv(env, self))

    def defect(self, t, path: str) -> tuple[dict, str] | None:
        """The known defect (its table, the reason) a node this backend runs on kernel path `path` hits, if any."""
        return defect_rules.defect_of(self.defects, t, path)

    def refusal(self, t, env: Env) -> tuple[str, str] | None:
        """None when supports_op would return true, else (rule, reason)."""
        desc = g.ggml_op_desc(t).decode()
        env = _OptionsEnv(env, self)
        why = check(self.all, t, env)
        if why:
            return why
        if desc in self.ops:
            return check(self.ops[desc], t, env)
        if self.default == "accept":
            return None
        return "not-listed", f"{desc} is not in {self.backend}'s supports_op"

    def offloads(self, t) -> bool:
        """The backend's offload_op: ggml_backend_cuda_device_offload_op (ggml-cuda.cu eced84c8 lines 5479-5483),
        the op's batch size (get_op_batch_size, lines 5464-5477) >= `offload_min_batch`, which the backend reads
        from GGML_OP_OFFLOAD_MIN_BATCH when it registers (line 5659; see `offload_min_batch_from_env`)."""
        if not self.offload_op:
            return False
        op = int(t.contents.op)
        if op == g.GGML_OP_GET_ROWS:
            batch = 0
        elif op == g.GGML_OP_MUL_MAT:
            batch = int(t.contents.ne[1])
        elif op in (g.GGML_OP_MUL_MAT_ID, g.GGML_OP_ROPE, g.GGML_OP_ROPE_BACK):
            batch = int(t.contents.ne[2])
        else:
            batch = int(g.ggml_nrows(t))
        return batch >= self.offload_min_batch


class _OptionsEnv:
    """The simulator's Env with what a rule may ask the profile: its run-time options (`env.options`) and the kernel
    path a node takes (`env.kernel_path(t)`: a product's acceptance can depend on it, from one rule)."""

    __slots__ = ("env", "profile")

    def __init__(self, env: Env, profile: Capabilities):
        self.env, self.profile = env, profile

    @property
    def options(self) -> dict[str, Any]:
        return self.profile.options

    def buffer_kind(self, t) -> str | None:
        return self.env.buffer_kind(t)

    def kernel_path(self, t) -> str:
        return self.profile.kernel_path(t, self.env)


def names() -> list[str]:
    return sorted(p.stem for p in DIR.glob("*.toml"))


#: the keys a profile may have: (type(s) accepted, required)
KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), False),  # a file loaded by path may leave it out: its stem is used
    "backend": ((str,), True),
    "source": ((str,), False),
    "buffer": ((dict,), True),
    "accepts": ((list,), True),
    "offload_op": ((bool,), False),
    "offload_min_batch": ((int,), False),
    "all": ((list,), False),
    "default": ((str,), False),
    "ops": ((dict,), False),
    "perf": ((dict,), False),
    "memory": ((dict,), False),
    "calibration": ((dict,), False),
    "paths": ((dict,), False),
    "options": ((dict,), False),
    "perf_base": ((str,), False),
    "offload_min_batch_env": ((str,), False),
    "defects": ((list,), False),
    "arith": ((str,), False),
}
BUFFER_KEYS = {"kind": str, "host": bool}


def is_path(name_or_path: str | Path) -> bool:
    """A path (to a .toml file) rather than a built-in profile name."""
    s = str(name_or_path)
    return isinstance(name_or_path, Path) or s.endswith(".toml") or "/" in s or "\\" in s


@cache
def _read(name: str) -> dict:
    path = DIR / f"{name}.toml"
    if not path.is_file():
        raise InvalidOptionError(
            f"unknown capability profile {name!r}: one of {', '.join(names())}, or a path to a .toml file"
        )
    return tomllib.loads(path.read_text())


def _read_path(path: Path) -> dict:
    if not path.is_file():
        raise InvalidOptionError(f"capability profile {path}: no such file")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InvalidOptionError(f"capability profile {path}: not valid TOML: {e}") from None


@cache
def op_names() -> frozenset[str]:
    """Every name ggml_op_desc can return: the ops, the unary ops and the GLU ops of this ggml."""
    out = {g.ggml_op_name(i).decode() for i in range(g.GGML_OP_COUNT)}
    out |= {g.ggml_unary_op_name(i).decode() for i in range(g.GGML_UNARY_OP_COUNT)}
    out |= {g.ggml_glu_op_name(i).decode() for i in range(g.GGML_GLU_OP_COUNT)}
    return frozenset(out)


@cache
def type_names() -> frozenset[str]:
    """Every type name of this ggml as a rate key spells it (F16, Q8_0, ...)."""
    out = set()
    for i in range(g.GGML_TYPE_COUNT):
        name = g.ggml_type_name(i)
        if name:
            out.add(name.decode().upper())
    return frozenset(out)


def _type_name(ts: tuple[type, ...]) -> str:
    return {str: "a string", bool: "true/false", int: "an integer", dict: "a table", list: "a list"}[ts[0]]


def _check_rules(items, where: str, origin: str) -> None:
    if not isinstance(items, list):
        raise InvalidOptionError(f"capability profile {origin}: {where} must be a list of rules, not {items!r}")
    for item in items:
        if isinstance(item, str):
            rname = item
        elif isinstance(item, list) and item and isinstance(item[0], str) and len(item) <= 2:
            rname = item[0]
        else:
            raise InvalidOptionError(
                f"capability profile {origin}: {where}: a rule is a name or [name, argument], not {item!r}"
            )
        if rname not in RULES:
            raise InvalidOptionError(
                f"capability profile {origin}: {where}: unknown rule {rname!r} (known: {', '.join(sorted(RULES))})"
            )


def validate(d: dict, origin: str) -> None:
    """Refuse unknown keys, missing keys, wrong types, unknown rules and unknown op names (InvalidOptionError,
    naming the key and `origin`, the file)."""
    for k in d:
        if k not in KEYS:
            raise InvalidOptionError(f"capability profile {origin}: unknown key {k!r} (known: {', '.join(KEYS)})")
    for k, (types, required) in KEYS.items():
        if k not in d:
            if required:
                raise InvalidOptionError(f"capability profile {origin}: missing key {k!r}")
            continue
        v = d[k]
        if not isinstance(v, types) or (types != (bool,) and isinstance(v, bool)):
            raise InvalidOptionError(f"capability profile {origin}: {k} must be {_type_name(types)}, not {v!r}")
    for k, v in d["buffer"].items():
        if k not in BUFFER_KEYS:
            raise InvalidOptionError(f"capability profile {origin}: unknown key 'buffer.{k}' (known: kind, host)")
        if not isinstance(v, BUFFER_KEYS[k]):
            raise InvalidOptionError(
                f"capability profile {origin}: buffer.{k} must be {_type_name((BUFFER_KEYS[k],))}, not {v!r}"
            )
    for k in BUFFER_KEYS:
        if k not in d["buffer"]:
            raise InvalidOptionError(f"capability profile {origin}: missing key 'buffer.{k}'")
    if not all(isinstance(x, str) for x in d["accepts"]):
        raise InvalidOptionError(f"capability profile {origin}: accepts must be a list of buffer kinds (strings)")
    if d.get("default", "refuse") not in ("refuse", "accept"):
        raise InvalidOptionError(
            f"capability profile {origin}: default must be 'refuse' or 'accept', not {d['default']!r}"
        )
    _check_rules(d.get("all", []), "all", origin)
    for k, v in d.get("options", {}).items():
        if not isinstance(v, bool | int | float | str):
            raise InvalidOptionError(f"capability profile {origin}: options.{k} must be a value, not {v!r}")
    for op, item in d.get("paths", {}).items():
        if op not in op_names():
            raise InvalidOptionError(f"capability profile {origin}: paths.{op}: not an op name of this ggml")
        pname = item[0] if isinstance(item, list) and item and isinstance(item[0], str) else None
        if pname not in PATHS or len(item) > 2:
            raise InvalidOptionError(f"capability profile {origin}: paths.{op}: a path rule is [name] or [name, "
                                     f"argument] with a name of {', '.join(sorted(PATHS))}, not {item!r}")
    from kzlab.analysis.predict.parameters import OP_CLASSES, backend_perf, memory_budget

    perf = backend_perf(str(d["backend"]), d.get("perf"), f"capability profile {origin}")  # refuses bad values
    memory_budget(d.get("memory"), f"capability profile {origin}")
    known = op_names()
    for key in perf.gflops:
        op, _, rest = key.partition(".")
        ty = rest.partition(".")[0]
        if rest and op not in known:
            raise InvalidOptionError(f"capability profile {origin}: gflops.{key}: {op} is not an op name of this ggml")
        if ty and ty not in type_names():
            raise InvalidOptionError(f"capability profile {origin}: gflops.{key}: {ty} is not a ggml type")
        if not rest and key != "default" and key not in known and key not in OP_CLASSES:
            raise InvalidOptionError(f"capability profile {origin}: gflops.{key}: neither an op of this ggml nor an "
                                     f"op class ({', '.join(OP_CLASSES)})")
    defect_rules.validate(d.get("defects", []), origin, known)
    for op, items in d.get("ops", {}).items():
        if op not in known:
            raise InvalidOptionError(f"capability profile {origin}: ops.{op}: not an op name of this ggml")
        _check_rules(items, f"ops.{op}", origin)


def _merge(base: dict, own: dict) -> dict:
    """`own` over `base`, tables merged key by key (a profile's [perf.gflops] adds to or replaces the base's)."""
    out = dict(base)
    for k, v in own.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and "value" not in v else v
    return out


def with_base(d: dict, origin: str) -> dict:
    """A profile with its `perf_base` (devices/perf/NAME.toml: the [perf] and [memory] tables several versions of
    one device share) merged under its own [perf] and [memory]."""
    name = d.get("perf_base")
    if name is None:
        return d
    path = DIR / "perf" / f"{name}.toml"
    if not isinstance(name, str) or not path.is_file():
        known = ", ".join(sorted(p.stem for p in (DIR / "perf").glob("*.toml")))
        raise InvalidOptionError(f"capability profile {origin}: perf_base {name!r}: not a shared table ({known})")
    base = tomllib.loads(path.read_text())
    unknown = set(base) - {"perf", "memory"}
    if unknown:
        raise InvalidOptionError(f"{path}: a perf base holds [perf] and [memory] only, not {', '.join(unknown)}")
    out = dict(d)
    for k in ("perf", "memory"):
        if k in base:
            out[k] = _merge(base[k], d.get(k, {}))
    return out


def load(name_or_path: str | Path) -> Capabilities:
    """A built-in profile by name (devices/*.toml) or a profile file by path (a .toml file), validated."""
    if is_path(name_or_path):
        path = Path(name_or_path)
        origin = str(path)
        d = with_base(dict(_read_path(path)), origin)
        validate(d, origin)
        d.setdefault("name", path.stem)
        d.setdefault("source", origin)
    else:
        origin = str(DIR / f"{name_or_path}.toml")
        d = with_base(dict(_read(str(name_or_path))), origin)
        validate(d, origin)
        d.setdefault("source", origin)
    d["path"] = origin
    d.pop("perf_base", None)
    offload_min_batch_from_env(d)
    buf = d.pop("buffer")
    return Capabilities(buffer=BufferType(buf["kind"], buf["kind"], bool(buf["host"])), **d)


def c_atoi(text: str) -> int:
    """C's atoi as glibc computes it: leading white space, an optional sign and the digits after it (0 when there
    are none, the rest ignored), through strtol (saturating at 64 bits) cast to a 32-bit int."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    v = max(-(2**63), min(2**63 - 1, int(m.group(1)))) if m else 0
    return (v + 2**31) % 2**32 - 2**31


def offload_min_batch_from_env(d: dict) -> None:
    """A profile's `offload_min_batch_env` (popped from `d`): the environment variable its backend reads its
    offload threshold from when it registers, as `getenv(NAME) ? atoi(getenv(NAME)) : 32` (ggml-cuda.cu eced84c8
    line 5659; CANN, SYCL, Vulkan and Metal read GGML_OP_OFFLOAD_MIN_BATCH alike). Set (even to ""), it replaces
    `offload_min_batch` as atoi reads it, and the profile's label says so: the placement is not the profile's own."""
    name = d.pop("offload_min_batch_env", None)
    if name is None or name not in os.environ:
        return
    d["offload_min_batch"] = c_atoi(os.environ[name])
    d["changes"] = [*d.get("changes", []), f"offload_min_batch={d['offload_min_batch']} from {name}"]


def _option_value(name: str, text: Any, old: Any, origin: str) -> Any:
    """A what-if option value given as text (`hmx=0`), of the type the profile's own value has."""
    if isinstance(old, bool):
        t = str(text).strip().lower()
        if t in ("1", "true", "on", "yes"):
            return True
        if t in ("0", "false", "off", "no"):
            return False
        raise InvalidOptionError(f"{origin}: option {name}={text!r}: expected on/off (1/0, true/false)")
    try:
        return type(old)(text)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"{origin}: option {name}={text!r}: expected {type(old).__name__}") from None


def parse_changes(items: list[str] | str) -> tuple[dict[str, str], list[str], list[str]]:
    """What-if items (`+SIN`, `-CONCAT`, `hmx=0`, as a list or one string split at spaces and commas) as
    (options, ops added, ops taken away)."""
    if isinstance(items, str):
        items = [x for x in items.replace(",", " ").split() if x]
    opts: dict[str, str] = {}
    add: list[str] = []
    remove: list[str] = []
    for item in items:
        if "=" in item:
            k, _, v = item.partition("=")
            opts[k.strip()] = v.strip()
        elif item[:1] in "+-":
            op = item[1:].strip().upper()
            if not op:
                raise InvalidOptionError(f"what-if {item!r} names no op (+OP adds an op, -OP takes one away, e.g. "
                                         "+SIN)")
            (add if item[0] == "+" else remove).append(op)
        else:
            raise InvalidOptionError(f"what-if {item!r}: expected +OP, -OP or NAME=VALUE (e.g. +SIN -CONCAT hmx=0)")
    return opts, add, remove


def load_changed(name_or_path: str | Path, changes: list[str] | str = ()) -> Capabilities:
    """A profile (`load`) with what-if items (`parse_changes`: `+SIN -CONCAT hmx=0`) applied (`with_changes`)."""
    caps = load(name_or_path)
    return with_changes(caps, *parse_changes(changes)) if changes else caps


def with_changes(caps: Capabilities, options: dict[str, Any] | None = None, add: list[str] = (),
                 remove: list[str] = ()) -> Capabilities:
    """A what-if of a profile: run-time options set (`hmx=0`), ops added to its supports_op (`+SIN`: accepted
    whatever their operands, but for the profile's `all` rules, such as its own buffers) or taken away
    (`-CONCAT`: refused). Unknown options and op names are refused with the known ones; the result's `changes`
    (and `label`) say what was changed, so that a placement never passes for the profile as read."""
    import dataclasses

    origin = f"capability profile {caps.name}"
    new_opts = dict(caps.options)
    changes = list(caps.changes)
    for k, v in (options or {}).items():
        if k not in caps.options:
            known = ", ".join(sorted(caps.options)) or "none"
            raise InvalidOptionError(f"{origin}: unknown option {k!r} (its options: {known})")
        new_opts[k] = _option_value(k, v, caps.options[k], origin)
        changes.append(f"{k}={'on' if new_opts[k] is True else 'off' if new_opts[k] is False else new_opts[k]}")
    ops = {k: list(v) for k, v in caps.ops.items()}
    known = op_names()
    for op in [*add, *remove]:
        if op not in known:
            raise InvalidOptionError(f"{origin}: {op!r} is not an op of this ggml (known: {', '.join(sorted(known))})")
    for op in add:
        if op in caps.ops or caps.default == "accept":
            raise InvalidOptionError(f"{origin}: +{op}: {caps.backend}'s supports_op already lists {op} (under its "
                                     "own rules); +OP adds an op it does not list")
        ops[op] = []
        changes.append(f"+{op}")
    for op in remove:
        ops[op] = [["never", f"taken away as a what-if (-{op})"]]
        changes.append(f"-{op}")
    return dataclasses.replace(caps, options=new_opts, ops=ops, changes=changes)
