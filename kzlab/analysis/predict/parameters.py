"""The numbers a prediction rests on, each with a value, a unit and where it comes from.

A backend's performance model (`BackendPerf`) is read from the `[perf]` table of its capability profile
(`kzlab/analysis/placement/devices/*.toml`, or a profile TOML given by path, e.g. one `kzlab calibrate`
wrote), with kzlab's defaults for what the table leaves out. Every value carries its source: `assumed: ...`
(nobody measured it), `calibrated from ...` (fitted to measured totals), `measured here` or
`measured on DEVICE: FILE`. A prediction lists them all and says when it rests on assumed values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kzlab.errors import InvalidOptionError

#: kzlab's defaults where a profile says nothing: deliberately round numbers, marked assumed
DEFAULTS: dict[str, tuple[float, str]] = {
    "gflops": (10.0, "GFLOP/s"),  # any op without a rate of its own
    "bandwidth_gbs": (10.0, "GB/s"),  # memory traffic of an op (roofline)
    "launch_us": (20.0, "us"),  # per node
    "sync_us": (100.0, "us"),  # per split run on the backend (dispatch + synchronisation)
    "copy_gbs": (10.0, "GB/s"),  # input copies into the backend's buffer (when not host-visible)
}
PERF_KEYS = {"source", "sources", "gflops", "bandwidth_gbs", "launch_us", "sync_us", "copy_gbs", "host_visible_copies"}
MEMORY_KEYS = {"source", "budget_bytes"}


@dataclass
class Parameter:
    """One input of a prediction."""

    name: str
    value: float
    unit: str
    source: str

    @property
    def assumed(self) -> bool:
        return self.source.startswith("assumed")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        v = f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)
        return f"{self.name} = {v} {self.unit}  [{self.source}]"


def _number(v: Any, what: str, where: str, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or (positive and v <= 0) or v < 0:
        need = "a number > 0" if positive else "a number >= 0"
        raise InvalidOptionError(f"{where}: {what} = {v!r}; expected {need}")
    return float(v)


@dataclass
class BackendPerf:
    """How fast one backend runs a node, and what a split on it costs (roofline + fixed costs)."""

    backend: str
    gflops: dict[str, Parameter] = field(default_factory=dict)  # "default", "OP" or "OP.TYPE" (e.g. MUL_MAT.F16)
    bandwidth_gbs: Parameter | None = None
    launch_us: Parameter | None = None
    sync_us: Parameter | None = None
    copy_gbs: Parameter | None = None
    #: copies into this backend's buffer are free when the buffer is host-visible (the profile says so)
    host_visible_copies: bool = False

    def rate(self, op: str, type_name: str) -> Parameter:
        """GFLOP/s for `op` on operands of `type_name`: OP.TYPE, else OP, else the default."""
        for key in (f"{op}.{type_name}", op, "default"):
            if key in self.gflops:
                return self.gflops[key]
        raise AssertionError("a BackendPerf always has a default rate")

    def parameters(self) -> list[Parameter]:
        out = list(self.gflops.values())
        out += [p for p in (self.bandwidth_gbs, self.launch_us, self.sync_us, self.copy_gbs) if p is not None]
        return out


def backend_perf(backend: str, perf: dict[str, Any] | None, where: str) -> BackendPerf:
    """A BackendPerf from a profile's `[perf]` table (None or missing keys: kzlab's assumed defaults)."""
    perf = dict(perf or {})
    unknown = set(perf) - PERF_KEYS
    if unknown:
        raise InvalidOptionError(f"{where}: unknown key(s) in [perf]: {', '.join(sorted(unknown))}")
    src = str(perf.get("source", "")) or f"assumed: {where} gives no source for its [perf] values"
    sources = perf.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise InvalidOptionError(f"{where}: [perf] sources must map value names to where they come from")
    unknown = set(sources) - (PERF_KEYS - {"source", "sources", "host_visible_copies"})
    if unknown:
        raise InvalidOptionError(f"{where}: [perf] sources name unknown value(s): {', '.join(sorted(unknown))}")
    default_src = "assumed: kzlab default (not measured)"
    out = BackendPerf(backend, host_visible_copies=bool(perf.get("host_visible_copies", False)))
    rates = perf.get("gflops", {})
    if isinstance(rates, int | float):
        rates = {"default": rates}
    if not isinstance(rates, dict):
        raise InvalidOptionError(f"{where}: [perf] gflops must be a number or a table of OP = GFLOP/s")
    for key, v in rates.items():
        out.gflops[key] = Parameter(
            f"{backend}.gflops.{key}", _number(v, f"gflops.{key}", where), "GFLOP/s", sources.get("gflops", src)
        )
    if "default" not in out.gflops:
        v, unit = DEFAULTS["gflops"]
        out.gflops["default"] = Parameter(f"{backend}.gflops.default", v, unit, default_src)
    for key in ("bandwidth_gbs", "launch_us", "sync_us", "copy_gbs"):
        v, unit = DEFAULTS[key]
        if key in perf:
            value = _number(perf[key], key, where, positive=key.endswith("gbs"))
            p = Parameter(f"{backend}.{key}", value, unit, sources.get(key, src))
        else:
            p = Parameter(f"{backend}.{key}", v, unit, default_src)
        setattr(out, key, p)
    return out


def memory_budget(memory: dict[str, Any] | None, where: str) -> Parameter | None:
    """The `[memory]` table's budget (bytes), or None when the profile states none."""
    memory = dict(memory or {})
    unknown = set(memory) - MEMORY_KEYS
    if unknown:
        raise InvalidOptionError(f"{where}: unknown key(s) in [memory]: {', '.join(sorted(unknown))}")
    if "budget_bytes" not in memory:
        return None
    src = str(memory.get("source", "")) or f"assumed: {where} gives no source for its budget"
    return Parameter("memory.budget_bytes", _number(memory["budget_bytes"], "budget_bytes", where), "bytes", src)
