"""The backend specification: one object for backend, threads, scheduler, op_offload and weights placement,
resolved once, up front, into what will really run.

`BackendSpec` is the request (it may say `auto` and leave `sched` to kzlab with None); `BackendSpec.resolve`
turns it into `ResolvedBackends`, with every choice made: the backend names in scheduler priority order, the
scheduler on or off, the thread count, the backend that holds the weights. A combination that cannot run as
asked is refused with a message, never replaced by another. `resolve_run` resolves a spec and a lowering
together (the lowering's `auto` choices depend on the backends), which is what every session does first.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from kzlab.environment import default_threads
from kzlab.errors import InvalidOptionError
from kzlab.graph.options import Lowering, LoweringPlan

#: more threads than this is a typo, not a machine (ggml would try to start them all)
MAX_THREADS = 1024
RPC_RX = re.compile(r"^rpc://(?P<host>[A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")
#: backends that run kzlab's fused CPU nodes (the others are devices: they run ggml ops only)
HOST_BACKENDS = ("cpu", "blas")
SPEC_FIELDS = ("backend", "threads", "sched", "op_offload", "weights_on")


def parse_rpc(spec: str) -> tuple[str, int]:
    """(host, port) of an `rpc://HOST:PORT` address, or InvalidOptionError."""
    m = RPC_RX.match(spec)
    if not m:
        raise InvalidOptionError(f"bad RPC address {spec!r}: expected rpc://HOST:PORT, e.g. rpc://127.0.0.1:50052")
    port = int(m.group("port"))
    if not 0 < port < 65536:
        raise InvalidOptionError(f"bad RPC port {port} in {spec!r}")
    return m.group("host").strip("[]"), port


def is_rpc(name: str) -> bool:
    return name.strip().lower().startswith("rpc")


@dataclass(frozen=True)
class ResolvedBackends:
    """Backends as they will run: what results record (`backend`, `sched`, `threads`, ...)."""

    names: tuple[str, ...]  # scheduler priority order, the CPU last under the scheduler
    sched: bool
    threads: int
    op_offload: bool
    weights_on: str  # the name (in `names`) of the backend whose buffer holds the weights
    requested: BackendSpec | None = None

    @property
    def label(self) -> str:
        """`cpu`, `rpc://h:p`, or `sched[blas+cpu]`: what ran, for tables and legends."""
        names = "+".join(self.names)
        return f"sched[{names}]" if self.sched else names

    @property
    def cpu_only(self) -> bool:
        """Every backend runs in this process on the CPU (so kzlab's fused nodes can run)."""
        return all(n in HOST_BACKENDS for n in self.names)

    @property
    def uses_rpc(self) -> bool:
        return any(is_rpc(n) for n in self.names)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "requested"}
        d["names"] = list(self.names)
        return d


@dataclass(frozen=True)
class BackendSpec:
    """Which backends to run on and how (a request; `resolve()` makes every choice).

    - `backend`: `auto` (BLAS + CPU under the scheduler when this build has BLAS and the scheduler is not
      turned off, else the CPU), `cpu`, `blas`, `rpc://HOST:PORT`, a device name, or a list (a priority list
      for the scheduler, the CPU added last when missing);
    - `sched`: True = under ggml_backend_sched, False = no scheduler (one backend, its own allocator),
      None = decide (on exactly when the backends need it: a list, or BLAS, which runs MUL_MAT only);
    - `threads`: CPU threads (None: every core this process may use); `op_offload`: the scheduler's flag;
    - `weights_on`: the backend whose buffer holds the weights (None: the first).
    """

    backend: str | tuple[str, ...] = "auto"
    threads: int | None = None
    sched: bool | None = None
    op_offload: bool = True
    weights_on: str | None = None

    def __post_init__(self) -> None:
        b = self.backend
        if isinstance(b, list):
            object.__setattr__(self, "backend", tuple(b))

    @classmethod
    def from_kw(cls, spec: BackendSpec | None = None, **kw: Any) -> BackendSpec:
        """`spec`, or one made from loose keywords (backend=, threads=, sched=, op_offload=, weights_on=); None
        values of keywords leave the spec's own."""
        unknown = set(kw) - set(SPEC_FIELDS)
        if unknown:
            raise InvalidOptionError(f"unknown backend option(s): {', '.join(sorted(unknown))}")
        if isinstance(spec, str | list | tuple) and kw.get("backend") is None:  # a backend name in that place
            spec, kw = None, {**kw, "backend": spec}
        if spec is not None and not isinstance(spec, BackendSpec):
            raise InvalidOptionError(f"backends={spec!r}: expected a kzlab BackendSpec")
        base = spec or cls()
        given = {k: v for k, v in kw.items() if v is not None and not (k == "op_offload" and v is True)}
        if spec is not None and given:
            raise InvalidOptionError(
                f"give the backend options either as backends=BackendSpec(...) or as keywords, not both "
                f"({', '.join(sorted(given))})"
            )
        return cls(**{**asdict(base), **given}) if given else base

    def names(self) -> list[str]:
        b = self.backend
        names = [b] if isinstance(b, str) else list(b)
        if not names or not all(isinstance(n, str) and n.strip() for n in names):
            raise InvalidOptionError(f"backend={b!r}: expected a name or a list of names")
        return [n.strip() for n in names]

    def resolve(self, available: list[str] | None = None) -> ResolvedBackends:
        """Every choice made, or InvalidOptionError naming what cannot run as asked.

        `available`: the backend names this ggml build has (default: asked from ggml's registry)."""
        threads = self.threads if self.threads is not None else default_threads()
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
            raise InvalidOptionError(f"threads={threads!r}: expected an integer from 1 to {MAX_THREADS}")
        if self.sched not in (None, True, False):
            raise InvalidOptionError(f"sched={self.sched!r}: expected True, False or None (decide)")
        if available is None:
            from kzlab.runtime.devices import available_backends

            available = available_backends()
        avail = [a.lower() for a in available]
        names = self.names()
        if [n.lower() for n in names] == ["auto"]:
            # ggml's CPU MUL_MAT is slow on the decoder's tall-skinny F32 products; OpenBLAS sgemm is not
            # (benchmarks/decode.py). BLAS needs the scheduler, so with sched=False auto is the plain CPU.
            names = ["blas"] if "blas" in avail and self.sched is not False else ["cpu"]
        for n in names:
            if is_rpc(n):
                parse_rpc(n)
            elif n.lower() not in avail:
                raise InvalidOptionError(f"unknown backend {n!r}: available here: {', '.join(available)}")
        names = [n if is_rpc(n) else n.lower() for n in names]
        if self.sched is False:
            if "blas" in names:
                raise InvalidOptionError(
                    "the blas backend computes MUL_MAT only, so it runs under the scheduler with the CPU: "
                    "sched=False cannot run it (use sched=True, or backend='cpu' for no scheduler)"
                )
            if len(names) > 1:
                raise InvalidOptionError(
                    f"a list of backends ({', '.join(names)}) runs under the scheduler: sched=False cannot run "
                    "it (name one backend, or use sched=True)"
                )
        use_sched = bool(self.sched) or len(names) > 1 or names == ["blas"]
        if use_sched and names[-1] != "cpu":
            names.append("cpu")
        if len({n.lower() for n in names}) != len(names):
            raise InvalidOptionError(f"backend list {names} names a backend twice")
        weights = names[0]
        if self.weights_on is not None:
            w = str(self.weights_on).lower()
            hits = [n for n in names if n.lower() == w or n.lower().startswith(w)]
            if not hits:
                raise InvalidOptionError(f"weights_on={self.weights_on!r} is not one of {names}")
            weights = hits[0]
        return ResolvedBackends(tuple(names), use_sched, threads, bool(self.op_offload), weights, self)


def resolve_run(
    lowering: Lowering | None,
    spec: BackendSpec | ResolvedBackends,
    fused_nodes: bool = True,
    absent: dict[str, str] | None = None,
) -> tuple[ResolvedBackends, LoweringPlan]:
    """The backends and the lowering plan a run will use, resolved together and once (an already resolved
    backend set is kept as it is). `fused_nodes=False`: the decoder family has no fused CPU nodes, so the plan
    is portable on any backend (`mode="fast"` or a fused option is refused, never recorded as run), with the
    CPU's conv lowerings where every backend is the CPU or BLAS.
    `absent`: the options the family has nothing for, with why (`Arch.not_applicable`), see `Lowering.resolve`."""
    rb = spec if isinstance(spec, ResolvedBackends) else spec.resolve()
    low = lowering or Lowering()
    if isinstance(low, LoweringPlan):
        low = low.requested or low
    return rb, low.resolve(rb.cpu_only, where=rb.label, absent=absent, fused_nodes=fused_nodes)
