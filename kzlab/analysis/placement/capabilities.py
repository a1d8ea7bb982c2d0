"""Capability profiles: what a backend (of one ggml version) accepts, one TOML table each, read from
devices/*.toml. (A timing result is a `kzlab.analysis.profile.Profile`; this is a backend's `Capabilities`.)

A capability profile is data so that it can be read next to the C source it transcribes: which buffer kinds the
backend accepts (supports_buft), which ops it accepts and under which named rules (supports_op, see
rules.py), and whether it has an offload_op hook.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ggml import ggml as g

from kzlab.analysis.placement.rules import RULES, Env, check
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

    def supports_buft(self, buft: BufferType) -> bool:
        return buft.kind in self.accepts or ("host" in self.accepts and buft.host)

    def refusal(self, t, env: Env) -> tuple[str, str] | None:
        """None when supports_op would return true, else (rule, reason)."""
        desc = g.ggml_op_desc(t).decode()
        why = check(self.all, t, env)
        if why:
            return why
        if desc in self.ops:
            return check(self.ops[desc], t, env)
        if self.default == "accept":
            return None
        return "not-listed", f"{desc} is not in {self.backend}'s supports_op"

    def offloads(self, t) -> bool:
        """The backend's offload_op (CUDA: batch size >= GGML_OP_OFFLOAD_MIN_BATCH)."""
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


def names() -> list[str]:
    return sorted(p.stem for p in DIR.glob("*.toml"))


@cache
def _read(name: str) -> dict:
    path = DIR / f"{name}.toml"
    if not path.is_file():
        raise InvalidOptionError(f"unknown capability profile {name!r}: one of {', '.join(names())}")
    return tomllib.loads(path.read_text())


def load(name: str) -> Capabilities:
    d = dict(_read(name))
    buf = d.pop("buffer")
    p = Capabilities(buffer=BufferType(buf["kind"], buf["kind"], bool(buf["host"])), **d)
    for items in [p.all, *p.ops.values()]:
        for item in items:
            rname = item if isinstance(item, str) else item[0]
            if rname not in RULES:
                raise InvalidOptionError(f"profile {name}: unknown rule {rname!r}")
    return p
