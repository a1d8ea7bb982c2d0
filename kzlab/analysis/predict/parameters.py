"""The numbers a prediction rests on, each with a value, a plausible range, a unit and where it comes from.

A backend's performance model (`BackendPerf`) is read from the `[perf]` table of its capability profile
(`kzlab/analysis/placement/devices/*.toml`, or a profile TOML given by path, e.g. one `kzlab calibrate`
wrote), with kzlab's defaults for what the table leaves out. Every value carries its source: `assumed: ...`
(nobody measured it), `calibrated from ...` (fitted to measured totals), `measured here` or
`measured on DEVICE: FILE`. A prediction lists them all and says when it rests on assumed values.

A value may be given as a range, `{ value = V, low = L, high = H, source = "..." }`: the prediction then draws it
log-uniformly over [L, H] (rates and costs are positive and multiplicative), so that what nobody measured shows
as a spread, not as a point. kzlab's own defaults are ranges too; a measured or calibrated value gets a narrow
range of its own (its run-to-run spread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kzlab.errors import InvalidOptionError

#: kzlab's defaults where a profile says nothing: (value, low, high, unit). Deliberately wide and marked assumed:
#: a decade either way of a round number, so that a default never pretends to know a device.
DEFAULTS: dict[str, tuple[float, float, float, str]] = {
    "gflops": (10.0, 1.0, 100.0, "GFLOP/s"),  # any op without a rate of its own
    "bandwidth_gbs": (10.0, 1.0, 100.0, "GB/s"),  # memory traffic of an op (roofline)
    "launch_us": (20.0, 2.0, 200.0, "us"),  # per node
    "sync_us": (100.0, 10.0, 1000.0, "us"),  # per split run on the backend (dispatch + synchronisation)
    "copy_gbs": (10.0, 1.0, 100.0, "GB/s"),  # input copies into the backend's buffer (when not host-visible)
    "cache_gbs": (20.0, 2.0, 200.0, "GB/s"),  # cache maintenance of the bytes crossing a shared buffer
}
DEFAULT_SOURCE = "assumed: kzlab default, a decade either way of a round number (not measured)"
#: the run-to-run spread given to a measured value (a decode or an op timed on a shared machine or device)
MEASURED_SPREAD = 0.03

#: ops grouped by what bounds them on a device, so that one rate or bandwidth per class serves every op of the class
#: and what two lowerings measure carries to a third with another op mix. An op's rate is looked up as OP.TYPE.PATH,
#: OP.TYPE, OP, its class, then `default`; its bandwidth as its class, then `bandwidth_gbs`.
OP_CLASSES: dict[str, tuple[str, ...]] = {
    # one pass over the operands, a few FLOPs an element
    "elementwise": ("ADD", "ADD1", "ADD_ID", "SUB", "MUL", "DIV", "SCALE", "SQR", "SQRT", "NEG", "ABS", "SGN",
                    "STEP", "CLAMP", "ACC", "RELU", "LEAKY_RELU", "FILL"),
    # contiguous copies: memcpy-like loops
    "copy": ("CPY", "CONT", "DUP", "CONCAT", "PAD", "REPEAT", "GET_ROWS", "SET", "SET_ROWS", "ROLL"),
    # gathers and scatters with index arithmetic per element (im2col, col2im)
    "gather": ("IM2COL", "IM2COL_3D", "COL2IM_1D", "PAD_REFLECT_1D"),
    # a reduction over each row, then a pass over it (norms, softmax, rope's per-row tables)
    "norm": ("NORM", "RMS_NORM", "L2_NORM", "GROUP_NORM", "SOFT_MAX", "SUM_ROWS", "SUM", "MEAN", "ARGMAX",
             "ARGSORT", "CUMSUM", "ROPE"),
    # a polynomial or table per element (exp, sin, tanh, the activations and gated units built on them)
    "transcendental": ("EXP", "EXPM1", "LOG", "SIN", "COS", "TANH", "SIGMOID", "SILU", "GELU", "GELU_ERF",
                       "GELU_QUICK", "SOFTPLUS", "ELU", "HARDSIGMOID", "HARDSWISH", "SWIGLU", "SWIGLU_OAI", "GEGLU",
                       "GEGLU_ERF", "GEGLU_QUICK", "REGLU"),
}
OP_CLASS = {op: cls for cls, ops in OP_CLASSES.items() for op in ops}
#: the paths a product can take on a device, as a placement record names them (`NodePlacement.path`)
PRODUCT_PATHS = ("hmx", "hvx")
#: a product's shape class, by its src1 rows (the activations' row count): a rate measured on short products does
#: not say what long ones run at. `OP.TYPE.PATH.long` prices products with more than LONG_ROWS src1 rows where a
#: profile gives it (a measured rate of long products); else `OP.TYPE.PATH` serves every shape, extrapolated, and the
#: prediction says so. 1024: the public HMX figures are prompt batches of 204-1024 rows (llama.cpp #21554, #22993,
#: #23368, #29199; #26501's traced product has 742), and ggml-hexagon 0.15.2 refuses more than 1024 rows
#: (ggml-hexagon.cpp 707321c4 line 2701), so a calibration on it sees none longer
LONG_ROWS = 1024
ROW_CLASSES = ("long",)


def op_class(op: str) -> str:
    """The class of an op (`OP_CLASSES`), or "" for a compute op of its own (products, convolutions)."""
    return OP_CLASS.get(op, "")


def observed_spread(values: Any) -> float | None:
    """The run-to-run spread of repeated measurements of one thing: the largest relative deviation of a run from
    their median (None for fewer than two runs: nothing was observed, the caller keeps its stated default)."""
    xs = sorted(float(v) for v in values or [])
    if len(xs) < 2:
        return None
    if not all(math.isfinite(x) and x > 0 for x in xs):
        raise InvalidOptionError(f"repeated measurements {xs!r}: expected times > 0")
    n = len(xs)
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    return max(abs(x / med - 1.0) for x in xs)


RANGED_KEYS = ("bandwidth_gbs", "launch_us", "sync_us", "copy_gbs", "cache_gbs", "matmul_skew", "libm_skew",
               "spin_ms", "contention", "cpu_relative", "l2flush_us", "map_us")
PERF_KEYS = {"source", "sources", "gflops", "bandwidth", *RANGED_KEYS, "host_visible_copies", "cache_maintenance",
             "host_libm", "cache", "hardware"}
#: the ggml ops whose CPU kernels call libm once per element (ggml-cpu/vec.h 0.15.3: logf line 872, sinf 878,
#: cosf 884, tanhf 909, expm1f 915, expf 936 and 956, erff 1013): scalar calls, or glibc libmvec's vector ones
#: where GCC vectorised the loops (kzlab.environment.ggml_cpu_libm)
LIBM_OPS = ("LOG", "SIN", "COS", "TANH", "ELU", "SIGMOID", "EXP", "GELU_ERF")
#: how a device's host CPU calls libm (`host_libm` in a device profile's [perf])
HOST_LIBM_CHOICES = ("scalar", "libmvec")
MEMORY_KEYS = {"source", "budget_bytes"}
RANGE_KEYS = {"value", "low", "high", "source", "public", "public_source"}
UNITS = {k: v[3] for k, v in DEFAULTS.items()} | {"matmul_skew": "x", "libm_skew": "x", "spin_ms": "ms",
                                                   "contention": "x", "cpu_relative": "x", "l2flush_us": "us",
                                                   "map_us": "us"}
#: the ranged values that are factors or times > 0 (the others may be 0)
POSITIVE_KEYS = ("matmul_skew", "libm_skew", "spin_ms", "contention", "cpu_relative", "l2flush_us", "map_us")
#: `[perf.cache]`: how the device keeps the caches of buffers it shares with the CPU coherent, per op
CACHE_KEYS = {"flush_all_bytes", "inputs", "batch_flushes", "batch_ops", "source"}
#: `[perf.hardware]`: the device's fixed facts the time model derives bounds from
HARDWARE_KEYS = {"soc", "threads", "vtcm_bytes", "clock_mhz", "f32_lanes", "source"}


@dataclass
class Parameter:
    """One input of a prediction: a value, and where it is uncertain the range [low, high] it is drawn over."""

    name: str
    value: float
    unit: str
    source: str
    low: float | None = None
    high: float | None = None
    #: what has been measured in public for this value (apart from its plausible range [low, high]), with its
    #: source: a calibrated value far outside it means the model lacks a cost, not that the device is that slow
    public: tuple[float, float] | None = None
    public_source: str = ""

    @property
    def assumed(self) -> bool:
        return self.source.startswith("assumed")

    @property
    def uncertain(self) -> bool:
        return self.low is not None and self.high is not None and self.high > self.low

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "value": self.value, "unit": self.unit, "source": self.source}
        if self.uncertain:
            d["low"], d["high"] = self.low, self.high
        if self.public is not None:
            d["public"], d["public_source"] = list(self.public), self.public_source
        return d

    def text(self) -> str:
        v = f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)
        rng = f" [{self.low:.4g} .. {self.high:.4g}]" if self.uncertain else ""
        pub = f" (public: {self.public[0]:.4g} .. {self.public[1]:.4g})" if self.public is not None else ""
        return f"{self.name} = {v}{rng}{pub} {self.unit}  [{self.source}]"

    def with_spread(self, rel: float = MEASURED_SPREAD) -> Parameter:
        """This value with a narrow range of +-rel (a measured or calibrated value's run-to-run spread)."""
        return Parameter(self.name, self.value, self.unit, self.source, self.value * (1 - rel), self.value * (1 + rel),
                         self.public, self.public_source)

    def with_range(self, low: float, high: float) -> Parameter:
        """This parameter drawn over another range (a widened bound, a what-if), its public interval kept."""
        return Parameter(self.name, self.value, self.unit, self.source, low, high, self.public, self.public_source)


def _number(v: Any, what: str, where: str, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or (positive and v <= 0) or v < 0:
        need = "a number > 0" if positive else "a number >= 0"
        raise InvalidOptionError(f"{where}: {what} = {v!r}; expected {need}")
    return float(v)


def ranged(v: Any, name: str, unit: str, source: str, what: str, where: str, positive: bool = True) -> Parameter:
    """A Parameter from a number or a `{ value, low, high, source }` table, validated: L <= V <= H, all > 0."""
    if not isinstance(v, dict):
        return Parameter(name, _number(v, what, where, positive), unit, source)
    unknown = set(v) - RANGE_KEYS
    if unknown:
        raise InvalidOptionError(f"{where}: {what} has unknown key(s) {', '.join(sorted(unknown))} "
                                 "(a range is { value = V, low = L, high = H, source = \"...\" })")
    if "value" not in v:
        raise InvalidOptionError(f"{where}: {what} is a range without a value")
    value = _number(v["value"], f"{what}.value", where, positive)
    # a range is drawn log-uniformly: its bounds must be > 0
    low = _number(v["low"], f"{what}.low", where) if "low" in v else value
    high = _number(v["high"], f"{what}.high", where) if "high" in v else value
    if low > value:
        raise InvalidOptionError(f"{where}: {what}: low {low:g} > value {value:g}")
    if value > high:
        raise InvalidOptionError(f"{where}: {what}: value {value:g} > high {high:g}")
    src = v.get("source", source)
    if not isinstance(src, str) or not src:
        raise InvalidOptionError(f"{where}: {what}.source must be a non-empty string")
    public, public_source = _public(v, what, where, low, high, unit)
    return Parameter(name, value, unit, src, low if high > low else None, high if high > low else None, public,
                     public_source)


def _public(v: dict[str, Any], what: str, where: str, low: float, high: float,
            unit: str) -> tuple[tuple[float, float] | None, str]:
    """A range's `public = [LOW, HIGH]` interval (what has been measured in public) and its `public_source`:
    two numbers > 0, LOW <= HIGH, inside the plausible range [low, high] (a public figure the range leaves out
    means the range is wrong), and a source."""
    if "public" not in v:
        if "public_source" in v:
            raise InvalidOptionError(f"{where}: {what} has a public_source without a public interval")
        return None, ""
    pub = v["public"]
    if not isinstance(pub, list) or len(pub) != 2:
        raise InvalidOptionError(f"{where}: {what}.public = {pub!r}; expected [LOW, HIGH], what has been measured "
                                 "in public")
    lo, hi = (_number(x, f"{what}.public", where) for x in pub)
    if lo > hi:
        raise InvalidOptionError(f"{where}: {what}.public: low {lo:g} > high {hi:g}")
    if lo < low or hi > high:
        raise InvalidOptionError(
            f"{where}: {what}: the public interval [{lo:g}, {hi:g}] {unit} lies outside its range [{low:g}, {high:g}]:"
            " a range must hold what has been measured in public; widen the range")
    src = v.get("public_source", "")
    if not isinstance(src, str) or not src:
        raise InvalidOptionError(f"{where}: {what}.public needs a public_source (the PR, issue or source line)")
    return (lo, hi), src


@dataclass
class CacheScheme:
    """How a device that shares buffers with the CPU without coherence cleans and invalidates its cache, as its
    source does it: per op, a tensor above `flush_all_bytes` costs one flush of the whole data cache (`l2flush_us`,
    whatever its size), a smaller one a clean and invalidate by address over its bytes (`cache_gbs`). `inputs`: the
    split's inputs (written by the CPU) are flushed before their first use in a batch; `batch_flushes`: whole-cache
    flushes per batch of at most `batch_ops` ops (the host sends a split's ops as one batch up to that size)."""

    flush_all_bytes: int
    inputs: bool
    batch_flushes: int
    batch_ops: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"flush_all_bytes": self.flush_all_bytes, "inputs": self.inputs, "batch_flushes": self.batch_flushes,
                "batch_ops": self.batch_ops, "source": self.source}


@dataclass
class Hardware:
    """The device's fixed facts (one SoC's, said which): HVX threads, VTCM bytes, the DSP clock and the F32 lanes
    of one HVX vector. The ranges of vector rates are bounded by the peak they give (`hvx_peak_gflops`), so that a
    clock or a thread count stated once bounds every rate that derives from it."""

    soc: str
    threads: int
    vtcm_bytes: int
    clock_mhz: float
    f32_lanes: int
    source: str

    def hvx_peak_gflops(self, type_name: str = "F32") -> float:
        """One element-op per lane per cycle on every HVX thread: F32 lanes (qf32), twice as many for F16 (hf)."""
        lanes = self.f32_lanes * (2 if type_name.upper() in ("F16", "BF16") else 1)
        return self.threads * lanes * self.clock_mhz / 1e3

    def parameters(self, backend: str) -> list[Parameter]:
        src = f"{self.soc}: {self.source}"
        return [Parameter(f"{backend}.hardware.threads", float(self.threads), "threads", src),
                Parameter(f"{backend}.hardware.vtcm_bytes", float(self.vtcm_bytes), "bytes", src),
                Parameter(f"{backend}.hardware.clock_mhz", self.clock_mhz, "MHz", src)]

    def to_dict(self) -> dict[str, Any]:
        return {"soc": self.soc, "threads": self.threads, "vtcm_bytes": self.vtcm_bytes, "clock_mhz": self.clock_mhz,
                "f32_lanes": self.f32_lanes, "source": self.source}


@dataclass
class BackendPerf:
    """How fast one backend runs a node, and what a split on it costs (roofline + fixed costs)."""

    backend: str
    #: "default", a class of OP_CLASSES, "OP", "OP.TYPE" or "OP.TYPE.PATH" (e.g. MUL_MAT.F16.hmx)
    gflops: dict[str, Parameter] = field(default_factory=dict)
    bandwidth_gbs: Parameter | None = None
    #: the bandwidth of an op class where it has one of its own (else `bandwidth_gbs`)
    bandwidth: dict[str, Parameter] = field(default_factory=dict)
    launch_us: Parameter | None = None
    sync_us: Parameter | None = None
    copy_gbs: Parameter | None = None
    cache_gbs: Parameter | None = None
    #: the device CPU's MUL_MAT speed relative to its other ops, against this machine's (CPU profiles only)
    matmul_skew: Parameter | None = None
    #: the device CPU's libm ops (LIBM_OPS) against this machine's when this machine's ggml vectorises them and the
    #: device's does not (CPU profiles only)
    libm_skew: Parameter | None = None
    #: how the host CPU of this device calls libm ("scalar", "libmvec"; "" when the profile does not say)
    host_libm: str = ""
    #: a backend whose worker threads share the CPU's cores and keep spinning after a split (OpenBLAS): the CPU
    #: split that follows runs slower by `contention` for at most `spin_ms` (both None: no such cost)
    spin_ms: Parameter | None = None
    contention: Parameter | None = None
    #: a backend that computes with ggml-cpu's kernels (an RPC server's CPU backend): a node on it takes the host
    #: CPU's time for the same node (the CPU profile, scaled as the CPU's nodes are) x this factor, where a CPU
    #: profile of the graph is given; the roofline otherwise (None: always the roofline)
    cpu_relative: Parameter | None = None
    #: copies into this backend's buffer are free when the buffer is host-visible (the profile says so)
    host_visible_copies: bool = False
    #: the bytes crossing between this backend and the CPU pay cache maintenance (shared, non-coherent buffers)
    cache_maintenance: bool = False
    #: how that maintenance is done per op (`[perf.cache]`); None: by address over the bytes crossing (`cache_gbs`)
    cache: CacheScheme | None = None
    #: a flush of the whole data cache (the per-op cost of a tensor above `cache.flush_all_bytes`)
    l2flush_us: Parameter | None = None
    #: a buffer the device maps on its first use (the first decode pays it, a warm one does not)
    map_us: Parameter | None = None
    #: the device's fixed facts (`[perf.hardware]`)
    hardware: Hardware | None = None

    def rate(self, op: str, type_name: str, path: str = "", rows: int = 0) -> Parameter:
        """GFLOP/s for `op` on operands of `type_name` taking `path` (a product's HMX or HVX kernel) with `rows`
        src1 rows: OP.TYPE.PATH.long for a product longer than LONG_ROWS, OP.TYPE.PATH, OP.TYPE, OP, the op's
        class, else the default."""
        keys = [f"{op}.{type_name}.{path}"] if path else []
        if path and rows > LONG_ROWS:
            keys.insert(0, f"{op}.{type_name}.{path}.long")
        keys += [f"{op}.{type_name}", op, op_class(op), "default"]
        for key in keys:
            if key in self.gflops:
                return self.gflops[key]
        raise AssertionError("a BackendPerf always has a default rate")

    def bandwidth_for(self, op: str) -> Parameter:
        """GB/s of an op's memory traffic: its class's bandwidth, else the backend's."""
        return self.bandwidth.get(op_class(op)) or self.bandwidth_gbs

    def parameters(self) -> list[Parameter]:
        out = list(self.gflops.values()) + list(self.bandwidth.values())
        fixed = (self.bandwidth_gbs, self.launch_us, self.sync_us, self.copy_gbs, self.cache_gbs, self.matmul_skew,
                 self.libm_skew, self.spin_ms, self.contention, self.cpu_relative, self.l2flush_us, self.map_us)
        out += [p for p in fixed if p is not None]
        if self.hardware is not None:
            out += self.hardware.parameters(self.backend)
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
    unknown = set(sources) - (PERF_KEYS - {"source", "sources", "host_visible_copies", "cache_maintenance",
                                           "host_libm", "cache", "hardware"})
    if unknown:
        raise InvalidOptionError(f"{where}: [perf] sources name unknown value(s): {', '.join(sorted(unknown))}")
    for flag in ("host_visible_copies", "cache_maintenance"):
        if flag in perf and not isinstance(perf[flag], bool):
            raise InvalidOptionError(f"{where}: [perf] {flag} must be true or false")
    host_libm = perf.get("host_libm", "")
    if host_libm not in ("", *HOST_LIBM_CHOICES):
        raise InvalidOptionError(f"{where}: [perf] host_libm = {host_libm!r}: expected one of "
                                 f"{', '.join(HOST_LIBM_CHOICES)}")
    out = BackendPerf(backend, host_visible_copies=bool(perf.get("host_visible_copies", False)),
                      cache_maintenance=bool(perf.get("cache_maintenance", False)), host_libm=host_libm)
    rates = perf.get("gflops", {})
    if isinstance(rates, int | float) or (isinstance(rates, dict) and "value" in rates):
        rates = {"default": rates}
    if not isinstance(rates, dict):
        raise InvalidOptionError(f"{where}: [perf] gflops must be a number or a table of OP = GFLOP/s")
    for key, v in rates.items():
        check_rate_key(str(key), where)
        out.gflops[key] = ranged(v, f"{backend}.gflops.{key}", "GFLOP/s", sources.get("gflops", src),
                                 f"gflops.{key}", where)
    bws = perf.get("bandwidth", {})
    if not isinstance(bws, dict):
        raise InvalidOptionError(f"{where}: [perf] bandwidth must be a table of CLASS = GB/s "
                                 f"(classes: {', '.join(OP_CLASSES)})")
    for key, v in bws.items():
        if key not in OP_CLASSES:
            raise InvalidOptionError(f"{where}: [perf] bandwidth.{key}: not an op class (known: "
                                     f"{', '.join(OP_CLASSES)}); the backend's own is bandwidth_gbs")
        out.bandwidth[key] = ranged(v, f"{backend}.bandwidth_gbs.{key}", "GB/s", sources.get("bandwidth_gbs", src),
                                    f"bandwidth.{key}", where)
    if "default" not in out.gflops:
        v, lo, hi, unit = DEFAULTS["gflops"]
        out.gflops["default"] = Parameter(f"{backend}.gflops.default", v, unit, DEFAULT_SOURCE, lo, hi)
    for key in RANGED_KEYS:
        unit = UNITS[key]
        if key in perf:
            p = ranged(perf[key], f"{backend}.{key}", unit, sources.get(key, src), key, where,
                       positive=key.endswith("gbs") or key in POSITIVE_KEYS)
        elif key in DEFAULTS:
            v, lo, hi, unit = DEFAULTS[key]
            p = Parameter(f"{backend}.{key}", v, unit, DEFAULT_SOURCE, lo, hi)
        else:
            p = None
        setattr(out, key, p)
    if (out.spin_ms is None) != (out.contention is None):
        raise InvalidOptionError(f"{where}: [perf] spin_ms and contention go together (the CPU split after one of "
                                 "this backend's runs slower by `contention` for at most `spin_ms`)")
    if "cache" in perf:
        out.cache = cache_scheme(perf["cache"], where)
        if not out.cache_maintenance:
            raise InvalidOptionError(f"{where}: [perf.cache] describes cache maintenance: set cache_maintenance = true")
        if out.l2flush_us is None:
            raise InvalidOptionError(f"{where}: [perf.cache] needs l2flush_us (the flush of the whole data cache a "
                                     "tensor above flush_all_bytes costs)")
    if "hardware" in perf:
        out.hardware = hardware(perf["hardware"], where)
        check_peaks(out, where)
    return out


def _int(v: Any, what: str, where: str, low: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise InvalidOptionError(f"{where}: {what} = {v!r}; expected an integer >= {low}")
    return v


def _table(v: Any, keys: set[str], what: str, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise InvalidOptionError(f"{where}: [perf.{what}] must be a table ({', '.join(sorted(keys))})")
    unknown = set(v) - keys
    if unknown:
        raise InvalidOptionError(f"{where}: [perf.{what}] unknown key(s) {', '.join(sorted(unknown))} (known: "
                                 f"{', '.join(sorted(keys))})")
    missing = keys - set(v)
    if missing:
        raise InvalidOptionError(f"{where}: [perf.{what}] needs {', '.join(sorted(missing))}")
    if not isinstance(v["source"], str) or not v["source"]:
        raise InvalidOptionError(f"{where}: [perf.{what}] source must name where it comes from (a source line, a PR)")
    return v


def cache_scheme(v: Any, where: str) -> CacheScheme:
    """A `[perf.cache]` table, validated."""
    v = _table(v, CACHE_KEYS, "cache", where)
    if not isinstance(v["inputs"], bool):
        raise InvalidOptionError(f"{where}: [perf.cache] inputs must be true or false")
    return CacheScheme(_int(v["flush_all_bytes"], "cache.flush_all_bytes", where, 1), v["inputs"],
                       _int(v["batch_flushes"], "cache.batch_flushes", where), _int(v["batch_ops"], "cache.batch_ops",
                                                                                    where, 1), v["source"])


def hardware(v: Any, where: str) -> Hardware:
    """A `[perf.hardware]` table, validated."""
    v = _table(v, HARDWARE_KEYS, "hardware", where)
    if not isinstance(v["soc"], str) or not v["soc"]:
        raise InvalidOptionError(f"{where}: [perf.hardware] soc must name the SoC the values are of")
    return Hardware(v["soc"], _int(v["threads"], "hardware.threads", where, 1),
                    _int(v["vtcm_bytes"], "hardware.vtcm_bytes", where, 1),
                    _number(v["clock_mhz"], "hardware.clock_mhz", where), _int(v["f32_lanes"], "hardware.f32_lanes",
                                                                              where, 1), v["source"])


def _hvx_type(key: str) -> str | None:
    """The type whose HVX peak bounds a rate key: F32 for the ops without a product kernel (`default` and the op
    classes run in F32 through qf32), F32 or F16 for an HVX product of that type; None for the rest (HMX, integer
    dot products of quantized weights)."""
    parts = key.split(".")
    if len(parts) == 1:
        return "F32" if key == "default" or key in OP_CLASSES else None
    if len(parts) >= 3 and parts[2] == "hvx" and parts[1] in ("F32", "F16"):
        return parts[1]
    return None


def check_peaks(perf: BackendPerf, where: str) -> None:
    """Refuse a floating-point HVX rate whose range reaches past the peak `[perf.hardware]` gives (threads x lanes x
    clock): a bound that assumed another clock or thread count is caught where it is stated."""
    hw = perf.hardware
    for key, p in perf.gflops.items():
        ty = _hvx_type(key)
        top = p.high if p.high is not None else p.value
        if ty is None:
            continue
        peak = hw.hvx_peak_gflops(ty)
        if top > peak * 1.001:
            raise InvalidOptionError(
                f"{where}: gflops.{key} reaches {top:g} GFLOP/s, above the HVX {ty} peak of {peak:.0f} GFLOP/s that "
                f"[perf.hardware] gives ({hw.threads} threads x {hw.f32_lanes * (2 if ty == 'F16' else 1)} lanes x "
                f"{hw.clock_mhz:g} MHz, {hw.soc})")


def check_rate_key(key: str, where: str) -> None:
    """A `[perf.gflops]` key: `default`, an op class, OP, OP.TYPE, OP.TYPE.PATH with PATH one of PRODUCT_PATHS, or
    OP.TYPE.PATH.CLASS with CLASS one of ROW_CLASSES (op and type names are checked against ggml where the profile
    is validated)."""
    parts = key.split(".")
    if not key or len(parts) > 4 or not all(parts):
        raise InvalidOptionError(f"{where}: gflops.{key}: expected default, an op class, OP, OP.TYPE, OP.TYPE.PATH or "
                                 "OP.TYPE.PATH.long")
    if len(parts) == 1:
        return
    if parts[0] in OP_CLASSES or parts[0] == "default":
        raise InvalidOptionError(f"{where}: gflops.{key}: a class ({parts[0]}) takes no type or path")
    if len(parts) >= 3 and parts[2] not in PRODUCT_PATHS:
        raise InvalidOptionError(f"{where}: gflops.{key}: unknown path {parts[2]!r} (known: "
                                 f"{', '.join(PRODUCT_PATHS)})")
    if len(parts) == 4 and parts[3] not in ROW_CLASSES:
        raise InvalidOptionError(f"{where}: gflops.{key}: unknown shape class {parts[3]!r} (known: "
                                 f"{', '.join(ROW_CLASSES)}: more than {LONG_ROWS} src1 rows)")


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
