"""Fit the time model's unknowns to end-to-end times measured on the device.

The user measures whole decodes on the device (e.g. CPU-only 3340 ms, CPU + HTP with ggml-hexagon v0.15.2
3950 ms). The CPU-only total fixes the CPU's scale (the device's CPU against this machine's, through a CPU
profile of the same graph); each device total then fixes one parameter of the device's backend (by default
its per-split cost `sync_us`, the term that grows with the number of splits; `copy_gbs`, `gflops` or, for a
device that flushes its whole cache per large tensor, `l2flush_us` on request). The result is a capability
profile (the device's, with a `[perf]` table whose every value says where it comes from) that reproduces the
measured totals, and the CPU scale to predict with.

This is a point fit of one parameter, every other one at its stated value; a fitted value outside the
parameter's plausible range is flagged (`Calibration.flags`), never accepted silently. The joint fit of all the
parameters within their ranges, which says what the totals could not tell apart, is `kzlab.whatif(...,
measured=...)` (`kzlab.analysis.predict.inference`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.analysis.predict.parameters import UNITS, Parameter
from kzlab.errors import InvalidInputError, InvalidOptionError

FITTABLE = ("sync_us", "copy_gbs", "gflops", "cpu_relative", "l2flush_us")
#: the fitted values the totals are linear in (a least-squares solve from two evaluations), with those two points
LINEAR = {"sync_us": (0.0, 1000.0), "cpu_relative": (1.0, 2.0), "l2flush_us": (1.0, 100.0)}
#: the linear values that must stay > 0 (a factor, a cost per flush), and what a device without them lacks
POSITIVE_FIT = {"cpu_relative": "no node priced from the CPU profile", "l2flush_us": "no whole-cache flush"}
CPU_KEYS = ("cpu", "cpu-only")


@dataclass
class Calibration:
    """What `calibrate` fitted, what stayed assumed, and how well the fitted model reproduces each total."""

    cpu_scale: Parameter
    fitted: list[Parameter]
    assumed: list[Parameter]
    measured: dict[str, float]
    predicted: dict[str, float]
    profile_text: str = ""
    notes: list[str] = field(default_factory=list)
    #: a fitted value outside its plausible range: the parameter, by how much, and which cost may be missing
    flags: list[str] = field(default_factory=list)

    def errors(self) -> dict[str, float]:
        """Relative error of each reproduced total."""
        return {k: self.predicted[k] / v - 1.0 for k, v in self.measured.items()}

    def summary(self) -> str:
        lines = [f"cpu scale {self.cpu_scale.value:.4g} [{self.cpu_scale.source}]"]
        lines += [f"fitted  {p.text()}" for p in self.fitted]
        lines += [f"assumed {p.text()}" for p in self.assumed]
        for k, v in self.measured.items():
            lines.append(f"{k}: measured {v:.1f} ms, reproduced {self.predicted[k]:.1f} ms "
                         f"({100 * (self.predicted[k] / v - 1):+.2f} %)")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"FLAG: {f}" for f in self.flags]
        return "\n".join(lines)


def _toml_value(v: Any) -> str:
    if isinstance(v, dict):  # an inline table (a range, or a table of rates)
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(float(v)) if isinstance(v, float) else str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else '"' + k + '"'


def perf_table(values: dict[str, Any], sources: dict[str, str], source: str) -> str:
    """A `[perf]` TOML table: its values and, per value, where it comes from."""
    lines = ["[perf]", f"source = {_toml_value(source)}"]
    for k, v in values.items():
        if isinstance(v, dict):
            lines.append(f"{k} = {_toml_value(v)}")
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    lines.append("sources = { " + ", ".join(f'{k} = {_toml_value(v)}' for k, v in sources.items()) + " }")
    return "\n".join(lines) + "\n"


def _strip_tables(text: str, names: tuple[str, ...]) -> str:
    """`text` without the TOML tables `names` (their header line up to the next table)."""
    out, skip = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and not s.startswith("[["):
            skip = s.strip("[] ").split(".")[0] in names
        if not skip:
            out.append(line)
    return "\n".join(out).rstrip() + "\n"


def calibrate(
    model: Any,
    measured: dict[str, float],
    cpu_profile: Any,
    frames: int,
    lowering: Any = None,
    fit: str = "sync_us",
    weights_on: str = "htp",
) -> Calibration:
    """Fit the CPU scale and one parameter of the device backend so that the predictions reproduce `measured`
    (configuration name -> ms: `cpu` for the CPU-only decode, a capability profile name or path for each
    device configuration). All device configurations must share one capability profile family (the same
    device backend); with more than one, the fit is a least-squares compromise and the residuals are shown."""
    from kzlab.analysis.placement.capabilities import load
    from kzlab.analysis.placement.simulate import simulate

    if fit not in FITTABLE:
        raise InvalidOptionError(f"fit={fit!r}: one of {', '.join(FITTABLE)}")
    if not measured:
        raise InvalidInputError("calibrate needs measured totals, e.g. cpu=3340 hexagon-v0.15.2=3950")
    for k, v in measured.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise InvalidInputError(f"measured total {k}={v!r}: expected a time in ms > 0")
    cpu_key = next((k for k in measured if k.lower() in CPU_KEYS), None)
    if cpu_key is None:
        raise InvalidInputError("calibrate needs the CPU-only total (cpu=MS): it fixes the CPU's scale")
    devices = [k for k in measured if k != cpu_key]
    if not devices:
        raise InvalidInputError("calibrate needs at least one device total besides cpu= (e.g. hexagon-v0.15.2=3950)")
    low = lowering
    base = dict(cpu_profile=cpu_profile)

    def run(profile: Any, predict: dict[str, Any]) -> Any:  # a point fit: priced at the stated values
        return simulate(model, profile, frames=frames, lowering=low, weights_on=weights_on if profile != "cpu"
                        else "cpu", predict={**base, "draws": 1, **predict})

    cpu_only = run("cpu", {})
    cpu_sync = sum(r["sync_ms"] for r in cpu_only.predicted.splits)  # at the stated values
    wall = next(p.value for p in cpu_only.predicted.parameters if p.name == "cpu.profile_wall_ms")
    scale = (measured[cpu_key] - cpu_sync) / wall
    if scale <= 0:
        raise InvalidInputError(f"the CPU-only total {measured[cpu_key]} ms is below the model's fixed costs")
    src = "calibrated from " + ", ".join(f"{k}={v:g} ms" for k, v in measured.items())
    scale_p = Parameter("cpu.scale", scale, "x", src)
    caps = [load(d) for d in devices]
    backend = caps[0].backend
    if any(c.backend != backend for c in caps):
        raise InvalidInputError(f"the device totals are of different backends ({', '.join(c.backend for c in caps)})")
    first = caps[0]
    perf0 = dict(getattr(first, "perf", None) or {})

    def total_with(value: float) -> list[float]:
        table = dict(perf0)
        table.pop("sources", None)
        if fit == "gflops":
            rates = dict(table.get("gflops") or {}) if isinstance(table.get("gflops"), dict) else {}
            rates = {k: v for k, v in rates.items() if k != "default"}
            table["gflops"] = {**rates, "default": value}
        else:
            table[fit] = value
        return [run(d, {"cpu_scale": scale, "perf": {backend: table}}).predicted.nominal_ms for d in devices]

    target = [measured[d] for d in devices]

    def loss(v: float) -> float:
        return sum(p - t for p, t in zip(total_with(v), target, strict=True))

    notes: list[str] = []
    if fit in LINEAR:  # the totals are linear in a per-split cost or a factor on the CPU's node times
        x0, x1 = LINEAR[fit]
        t0, t1 = total_with(x0), total_with(x1)
        slopes = [(b - a) / (x1 - x0) for a, b in zip(t0, t1, strict=True)]
        denom = sum(k * k for k in slopes)
        if denom == 0:
            what = POSITIVE_FIT.get(fit, "no split on the device")
            raise InvalidInputError(f"the device configurations have {what}: {fit} cannot be fitted")
        value = x0 + sum(k * (m - a) for k, m, a in zip(slopes, target, t0, strict=True)) / denom
        if value <= 0 and fit in POSITIVE_FIT:
            notes.append(f"even with {fit} at nothing the model predicts more than measured; {fit} stays at "
                         "1e-3 and the other terms (splits, copies) decide")
            value = 1e-3
        elif value < 0:
            notes.append(f"even with no per-split cost the model predicts more than measured; {fit} stays 0 and "
                         "the other terms (CPU fallbacks, copies) decide")
            value = 0.0
    else:  # bandwidths and rates: the total falls as they grow
        lo, hi = 1e-3, 1e4
        if loss(hi) > 0:
            notes.append(f"even an unbounded {fit} predicts more than measured: other terms decide")
            value = hi
        elif loss(lo) < 0:
            notes.append(f"even {fit}={lo} predicts less than measured")
            value = lo
        else:
            value = math.exp(_bisect(lambda x: loss(math.exp(x)), math.log(lo), math.log(hi), increasing=False))
    reproduced = dict(zip(devices, total_with(value), strict=True))
    cpu_total = run("cpu", {"cpu_scale": scale}).predicted.nominal_ms
    unit = "GFLOP/s" if fit == "gflops" else UNITS[fit]
    fitted = [Parameter(f"{backend}.{fit}" + (".default" if fit == "gflops" else ""), value, unit, src)]
    # what the fitted profile leaves assumed
    from kzlab.analysis.predict.parameters import backend_perf

    table = dict(perf0)
    table.pop("sources", None)
    assumed = [p for p in backend_perf(backend, table, f"capability profile {first.name}").parameters()
               if p.assumed and not p.name.startswith(f"{backend}.{fit}")]
    text = profile_text(first, perf0, fit, value, src, scale, measured)
    prior = {p.name: p for p in backend_perf(backend, table, f"capability profile {first.name}").parameters()}
    flags = [f for f in (implausible(p, prior.get(p.name)) for p in fitted) if f]
    return Calibration(scale_p, fitted, assumed, dict(measured), {cpu_key: cpu_total, **reproduced}, text, notes,
                       flags)


def implausible(fitted: Parameter, prior: Parameter | None) -> str:
    """A flag when a fitted value lies outside the parameter's plausible range (never accepted silently)."""
    from kzlab.analysis.predict.inference import missing_cost

    if prior is None or not prior.uncertain:
        return ""
    v = fitted.value
    if prior.low <= v <= prior.high:
        return ""
    side, bound = ("below", prior.low) if v < prior.low else ("above", prior.high)
    factor = bound / v if v < prior.low else v / bound
    if v <= 0:
        return (f"{fitted.name} = {v:.4g} {fitted.unit}: no value of it reproduces the totals within its plausible "
                f"range [{prior.low:.4g}, {prior.high:.4g}] ({prior.source}); the model may lack "
                f"{missing_cost(fitted.name)}")
    return (f"{fitted.name} = {v:.4g} {fitted.unit} is {factor:.3g}x {side} its plausible range "
            f"[{prior.low:.4g}, {prior.high:.4g}] ({prior.source}); a value there would stand for "
            f"{missing_cost(fitted.name)}. Fit with `kzlab whatif --measured`, which keeps every parameter in "
            "its range and says which ones the totals cannot tell apart")


def _bisect(f, lo: float, hi: float, increasing: bool, steps: int = 60) -> float:
    for _ in range(steps):
        mid = (lo + hi) / 2
        if (f(mid) < 0) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def profile_text(caps: Any, perf0: dict[str, Any], fit: str, value: float, src: str, scale: float,
                 measured: dict[str, float]) -> str:
    """The device's capability profile with a `[perf]` table holding the fitted value (and its source)."""
    path = Path(caps.path) if getattr(caps, "path", None) else None
    original = path.read_text() if path is not None and path.is_file() else ""
    if not original:
        raise InvalidInputError(f"capability profile {caps.name}: no file to base the calibrated profile on")
    body = _strip_tables(original, ("perf", "calibration"))
    lines = body.splitlines()
    for i, line in enumerate(lines):  # a name of its own, so it does not shadow the built-in profile
        if line.startswith("name"):
            lines[i] = f'name = "{caps.name}-calibrated"'
            break
    values: dict[str, Any] = {k: v for k, v in perf0.items() if k not in ("source", "sources")}
    sources = dict(perf0.get("sources") or {})
    if fit == "gflops":
        rates = dict(values.get("gflops") or {}) if isinstance(values.get("gflops"), dict) else {}
        values["gflops"] = {**rates, "default": value}
        sources["gflops"] = src
    else:
        values[fit] = value
        sources[fit] = src
    for k in ("gflops", "bandwidth_gbs", "launch_us", "sync_us", "copy_gbs"):
        if k not in sources:
            sources[k] = perf0.get("source") if k in perf0 else "assumed: kzlab default (not measured)"
    cal = ["[calibration]", f"cpu_scale = {scale!r}", f"source = {_toml_value(src)}",
           "measured_ms = { " + ", ".join(f'"{k}" = {float(v)!r}' for k, v in measured.items()) + " }"]
    return "\n".join(lines).rstrip() + "\n\n" + perf_table(values, sources, src) + "\n" + "\n".join(cal) + "\n"


def measured_profile_text(backend: str, perf: dict[str, Any]) -> str:
    """The built-in capability profile of `backend` (cpu, blas, rpc) with a `[perf]` table of measured values."""
    from kzlab.analysis.placement.capabilities import load

    name = "rpc" if backend.lower().startswith("rpc") else backend.lower()
    caps = load(name)
    original = Path(caps.path).read_text()
    body = _strip_tables(original, ("perf", "calibration"))
    src = str(perf.get("source", "measured here"))
    values = {k: v for k, v in perf.items() if k not in ("source", "sources")}
    given = perf.get("sources") or {}
    return body.rstrip() + "\n\n" + perf_table(values, {k: str(given.get(k, src)) for k in values}, src)
