"""Layout maps: how one family of files names the decoder's tensors, as plain data.

A map is a small TOML file. Its `[tensors]` table maps a regular expression over the file's tensor names
(matched in full) to a canonical role template; `{N}` inserts capture group N, `{N+1}` / `{N-2}` shift it
(for files that number blocks from 0, or residual units from 2 as PyTorch's ModuleList does):

    [layout]
    name = "my-converter"
    architectures = ["qwen3-tts-tokenizer"]     # optional: general.architecture values it accepts
    family = "qwen3-tts-12hz"                   # optional: the decoder family (kzlab.arch) of its roles
    detect = ['^tok_dec\\.dec\\.1\\.res\\.4\\.']  # optional: each must match some tensor name
    ignore = ['^tok_enc\\.']                     # tensors to skip (the encoder)

    [tensors]
    'kz\\.bigvgan\\.(\\d+)\\.res\\.(\\d+)\\.conv1\\.w' = "dec.{1+1}.res.{2}.conv1.weight"

An optional `[hparams]` table gives what neither shapes nor metadata tell, e.g. `num_heads = 4` for a
file without a head count, or `group_norm_groups = 16` for a WavTokenizer file without one: each family
accepts its own (its files half's `OVERRIDABLE`, see kzlab.formats.given), and the values are recorded as
given, not read.

An optional `[transforms]` table maps a regular expression over the file's tensor names to a value
transform applied at load, as data for any family. One kind so far:

    [transforms]
    'dec\\.bb\\.cnx\\.\\d+\\.norm\\.(scale|shift)\\.weight' = "row:bandwidth_id"

`row:NAME` takes one row of a [rows, C] table (e.g. an AdaLayerNorm's per-bandwidth scales) for a role of
shape [C]: the row the hyperparameter NAME gives (`--hparam NAME=N`, `hparams=`, the map's `[hparams]`), 0
when none does; the family must accept NAME, and a row outside the table is refused. `log` (x -> ln x) and
`log_recip:EPS` (x -> ln(1/x - EPS)) undo constants a converter stored folded, e.g. SnakeBeta's exp(alpha)
and 1/(exp(beta) + 1e-9): the role gets the upstream parameter back (F32), and a value they cannot undo
(x <= 0, or 1/x <= EPS) is refused naming the tensor. `split` takes a tensor of stacked parts apart along its
first (outermost) axis, one role per part: the rule's role has `{k}` where the part's index goes (e.g.
llama.cpp's 15 acoustic codebooks in one 3-D tensor, `vq.rest.{k}.codebook`); a depth the family does not
have is refused by its role checks. `split:a,b,c` cuts the first axis into as many equal parts, named: e.g. a
transformer's q, k and v stacked in one in_proj, `attn_{k}.weight` -> `attn_q.weight`, `attn_k.weight`,
`attn_v.weight`. `diagonal` reads a depthwise kernel stored as a dense one ([C, C, K], zeros off the diagonal, as
codec.cpp stores Mimi's upsample) back as [C, 1, K]; a kernel with anything off its diagonal is refused.

Packed files (one file, several models, names through a table) are read with `[layout]` keys: `extends` (a
built-in map whose rules and ignores follow the map's own), `prefix` (only names under it are the decoder's,
the prefix dropped), `names_from` + `mangled` (stored names matching `mangled`, whose one group is an index,
are that entry of the metadata string array `names_from`), `config_from` + `config_file` (hyperparameters
from a config.json embedded as `config_from`.names / .offsets / .data), e.g. audio.cpp's
`audiocpp_qwen3tts.toml`. `metadata = false` says the file's metadata belongs to its other parts (llama.cpp's
mmproj: the `clip.*` keys describe the speaker encoder and the code predictor): the decoder's hyperparameters
then come from the shapes, the map's `[hparams]` and the user, never from a key that only looks like one.

Codebooks given with `vq.*.usage` tensors are divided by the usage at load (clamped at 1e-5, as
upstream); without them they are taken as already divided. The built-in dialects are maps like this one
(`kzlab/formats/layouts/*.toml`), so there is one mechanism for every file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.errors import LayoutError

BUILTIN_DIR = Path(__file__).with_name("layouts")
#: value transforms a map may name (see the module docstring): kind -> what its argument is
TRANSFORMS = {"row": "NAME", "log": "", "log_recip": "EPS", "split": "[NAMES]", "diagonal": ""}
_SLOT = re.compile(r"\{(\d+)\s*([+-]\s*\d+)?\}")


@dataclass
class LayoutMap:
    """One dialect: name patterns -> canonical roles."""

    name: str
    rules: list[tuple[re.Pattern[str], str]]
    architectures: tuple[str, ...] = ()
    detect: tuple[re.Pattern[str], ...] = ()
    ignore: tuple[re.Pattern[str], ...] = ()
    description: str = ""
    source: str = ""
    notes: list[str] = field(default_factory=list)
    hparams: dict[str, Any] = field(default_factory=dict)
    #: metadata this dialect is known to write wrong: hyperparameter name -> why (a note, not a warning)
    quirks: dict[str, str] = field(default_factory=dict)
    #: the decoder family (kzlab.arch) whose roles the map names; "" = the one its architectures belong to, else
    #: the first registered family
    family: str = ""
    #: value transforms: (pattern over file tensor names, (kind, argument)), e.g. ("row", "bandwidth_id")
    transforms: list[tuple[re.Pattern[str], tuple[str, str]]] = field(default_factory=list)
    #: packed files: stored names matching `mangled` (one group: an index) are entries of the metadata string
    #: array `names_from`; only tensors under `prefix` are the decoder's (the prefix dropped before the rules);
    #: hyperparameters from the config file `config_file` embedded as `config_from`.{names,offsets,data}
    names_from: str = ""
    mangled: re.Pattern[str] | None = None
    prefix: str = ""
    config_from: str = ""
    config_file: str = ""
    #: False where the file's metadata describes its other parts, not the decoder (llama.cpp's mmproj: the
    #: clip.* keys are the speaker encoder's and the code predictor's): hyperparameters then come from the
    #: shapes, the map's [hparams] and the user only
    read_metadata: bool = True

    @classmethod
    def from_dict(cls, d: dict, source: str = "") -> LayoutMap:
        head = d.get("layout", {})
        tensors = d.get("tensors", {} if head.get("extends") else None)
        if not isinstance(tensors, dict) or not (tensors or head.get("extends")):
            raise LayoutError(
                f"layout map {source or '?'}: a [tensors] table with at least one entry is needed (or `extends`)"
            )
        rules = []
        for pattern, template in tensors.items():
            try:
                rx = re.compile(pattern)
            except re.error as e:
                raise LayoutError(f"layout map {source}: bad regular expression {pattern!r}: {e}") from None
            if not isinstance(template, str):
                raise LayoutError(f"layout map {source}: the role for {pattern!r} must be a string")
            for m in _SLOT.finditer(template):
                if int(m.group(1)) > rx.groups:
                    raise LayoutError(
                        f"layout map {source}: {template!r} uses group {m.group(1)} but {pattern!r} has {rx.groups}"
                    )
            rules.append((rx, template))

        def rxs(key: str) -> tuple[re.Pattern[str], ...]:
            try:
                return tuple(re.compile(p) for p in head.get(key, []))
            except re.error as e:
                raise LayoutError(f"layout map {source}: bad regular expression in {key}: {e}") from None

        hparams = d.get("hparams", {})
        if not isinstance(hparams, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in hparams.values()
        ):
            raise LayoutError(f"layout map {source}: [hparams] must map names to numbers")
        quirks = d.get("quirks", {})
        if not isinstance(quirks, dict) or not all(isinstance(v, str) for v in quirks.values()):
            raise LayoutError(f"layout map {source}: [quirks] must map hyperparameter names to explanations")
        transforms = []
        for pattern, spec in (d.get("transforms") or {}).items():
            kind, _, arg = str(spec).partition(":")
            if not _transform_ok(kind, arg):
                raise LayoutError(
                    f"layout map {source}: transform {spec!r} for {pattern!r}: expected one of "
                    f"{', '.join(k + (':' + a if a else '') for k, a in TRANSFORMS.items())}"
                )
            try:
                transforms.append((re.compile(pattern), (kind, arg)))
            except re.error as e:
                raise LayoutError(f"layout map {source}: bad regular expression {pattern!r}: {e}") from None
        extends = str(head.get("extends", ""))
        base_ignore: tuple[re.Pattern[str], ...] = ()
        if extends:
            d_base = _builtin_dict(extends)
            if d_base is None or d_base.get("layout", {}).get("extends"):
                raise LayoutError(
                    f"layout map {source}: extends {extends!r}, which is not a built-in map that extends none"
                )
            base = cls.from_dict(d_base, source=f"built-in {extends}")
            rules = rules + [r for r in base.rules if r not in rules]  # the map's own rules first
            base_ignore = base.ignore
        mangled = head.get("mangled")
        try:
            mangled_rx = re.compile(str(mangled)) if mangled else None
        except re.error as e:
            raise LayoutError(f"layout map {source}: bad regular expression in mangled: {e}") from None
        if mangled_rx is not None and mangled_rx.groups != 1:
            raise LayoutError(f"layout map {source}: mangled must have one group (the index into names_from)")
        if bool(head.get("names_from")) != (mangled_rx is not None):
            raise LayoutError(f"layout map {source}: names_from and mangled go together")
        if bool(head.get("config_from")) != bool(head.get("config_file")):
            raise LayoutError(f"layout map {source}: config_from and config_file go together")
        family = str(head.get("family", ""))
        if family:
            from kzlab.arch import family_names

            if family not in family_names():
                raise LayoutError(f"layout map {source}: unknown family {family!r} ({', '.join(family_names())})")
        read_metadata = head.get("metadata", True)
        if not isinstance(read_metadata, bool):
            raise LayoutError(f"layout map {source}: metadata must be true or false")
        return cls(
            read_metadata=read_metadata,
            family=family,
            transforms=transforms,
            names_from=str(head.get("names_from", "")),
            mangled=mangled_rx,
            prefix=str(head.get("prefix", "")),
            config_from=str(head.get("config_from", "")),
            config_file=str(head.get("config_file", "")),
            hparams=dict(hparams),
            quirks=dict(quirks),
            name=str(head.get("name", Path(source).stem if source else "custom")),
            rules=rules,
            architectures=tuple(head.get("architectures", [])),
            detect=rxs("detect"),
            ignore=rxs("ignore") + base_ignore,
            description=str(head.get("description", "")),
            source=source,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> LayoutMap:
        p = Path(path)
        if not p.is_file():
            raise LayoutError(f"layout map {p}: no such file")
        try:
            d = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise LayoutError(f"layout map {p}: not valid TOML: {e}") from None
        return cls.from_dict(d, source=str(p))

    def role_of(self, name: str) -> str | None:
        """The canonical role of a file tensor name, or None when no rule matches."""
        for rx, template in self.rules:
            m = rx.fullmatch(name)
            if m:
                return _SLOT.sub(lambda s, m=m: _fill(m.group(int(s.group(1))), s.group(2)), template)
        return None

    def transform_of(self, name: str) -> tuple[str, str] | None:
        """The value transform (kind, argument) of a file tensor name, or None."""
        for rx, spec in self.transforms:
            if rx.fullmatch(name):
                return spec
        return None

    def is_ignored(self, name: str) -> bool:
        return any(rx.search(name) for rx in self.ignore)

    def matches(self, arch: str | None, names: Iterable[str]) -> bool:
        """Whether a file with this architecture and these tensor names is of this dialect."""
        if self.architectures and arch not in self.architectures:
            return False
        names = list(names)
        return all(any(rx.search(n) for n in names) for rx in self.detect)

    def apply(self, names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
        """Map file names to roles. Returns ({role: file name}, [unmapped names]); refuses duplicates."""
        mapping: dict[str, str] = {}
        unmapped: list[str] = []
        for n in names:
            if self.is_ignored(n):
                continue
            role = self.role_of(n)
            if role is None:
                unmapped.append(n)
                continue
            if role in mapping:
                raise LayoutError(
                    f"layout '{self.name}': tensors '{mapping[role]}' and '{n}' both map to role '{role}'"
                )
            mapping[role] = n
        return mapping, unmapped

    def to_toml(self) -> str:
        """The map as TOML text (what `kzlab layout infer -o` writes)."""
        lines = ["[layout]", f"name = {_q(self.name)}"]
        if self.description:
            lines.append(f"description = {_q(self.description)}")
        if self.architectures:
            lines.append("architectures = [" + ", ".join(_q(a) for a in self.architectures) + "]")
        if self.family:
            lines.append(f"family = {_q(self.family)}")
        if self.detect:
            lines.append("detect = [" + ", ".join(_lit(r.pattern) for r in self.detect) + "]")
        if self.ignore:
            lines.append("ignore = [" + ", ".join(_lit(r.pattern) for r in self.ignore) + "]")
        for note in self.notes:
            lines.append(f"# {note}")
        if self.hparams:
            lines += ["", "[hparams]"] + [f"{k} = {v!r}" for k, v in self.hparams.items()]
        lines += ["", "[tensors]"]
        lines += [f"{_lit(rx.pattern)} = {_q(t)}" for rx, t in self.rules]
        if self.transforms:
            lines += ["", "[transforms]"]
            lines += [f"{_lit(rx.pattern)} = {_q(k + (':' + a if a else ''))}" for rx, (k, a) in self.transforms]
        return "\n".join(lines) + "\n"


def _transform_ok(kind: str, arg: str) -> bool:
    want = TRANSFORMS.get(kind)
    if want is None:
        return False
    if want == "NAME":
        return arg.isidentifier()
    if want == "[NAMES]":
        return arg == "" or all(p.isidentifier() for p in arg.split(","))
    if want == "EPS":
        try:
            return float(arg) >= 0.0
        except ValueError:
            return False
    return arg == ""


def _fill(value: str, offset: str | None) -> str:
    """A captured group, shifted by an index offset when the template asks for one."""
    if not offset:
        return value
    return str(int(value) + int(offset.replace(" ", "")))


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _lit(s: str) -> str:
    """A TOML literal string when possible (regexes read best without doubled backslashes)."""
    return f"'{s}'" if "'" not in s and "\n" not in s else _q(s)


def _builtin_dict(name: str) -> dict | None:
    """The TOML table of the built-in map called `name` (read without building it), or None."""
    for p in sorted(BUILTIN_DIR.glob("*.toml")):
        d = tomllib.loads(p.read_text(encoding="utf-8"))
        if d.get("layout", {}).get("name") == name:
            return d
    return None


def builtin_layouts() -> list[LayoutMap]:
    """The dialects kzlab knows by name, from the TOML files beside this module."""
    return [LayoutMap.from_file(p) for p in sorted(BUILTIN_DIR.glob("*.toml"))]


def get_layout(spec: str | Path | LayoutMap) -> LayoutMap:
    """A layout by built-in name or TOML path."""
    if isinstance(spec, LayoutMap):
        return spec
    s = str(spec)
    for lm in builtin_layouts():
        if lm.name == s:
            return lm
    if s.endswith(".toml") or Path(s).is_file():
        return LayoutMap.from_file(s)
    names = ", ".join(lm.name for lm in builtin_layouts())
    raise LayoutError(f"unknown layout {s!r}: give a built-in name ({names}) or a .toml map file")
