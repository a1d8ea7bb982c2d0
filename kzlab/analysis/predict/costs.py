"""A placement's time as a function of the parameters, compiled once and evaluated for many draws at once.

The time model (`timing.predict`) walks the placement once and records, for every node and split, which term
prices it and which parameters that term reads. `CostModel.evaluate` then prices all draws of the parameters
in a few array operations (draws x nodes), so a distribution of a few thousand draws costs milliseconds and no
second simulation. The terms are kept apart on purpose, so that device totals of different placements can tell
them apart (a calibration fits them jointly):

- CPU nodes: their profiled time x the CPU's scale (from the device's CPU-only total when given: the total is
  reproduced for any `matmul_skew`, which moves time between the CPU's MUL_MATs and the rest, and any
  `libm_skew`, which does the same for the ops that call libm per element, when the device's CPU calls a scalar
  libm and this machine's ggml a vectorised one);
- device nodes on a backend that computes with ggml-cpu's kernels (an RPC server's CPU backend, `cpu_relative`):
  the host CPU's time for the same node, scaled as a CPU node is, x that factor;
- other device nodes: a roofline max(FLOPs / rate(op, type), bytes / bandwidth) + a per-node dispatch (`launch_us`),
  or a measured op time x its spread;
- splits: a per-split round trip (`sync_us`), input copies into a buffer that is not host-visible
  (`copy_gbs`), and cache maintenance of a shared, non-coherent buffer: per op as the device's source does it (a
  flush of the whole data cache, `l2flush_us`, for each tensor above its threshold and per batch where the source
  flushes per batch; a clean and invalidate by address, `cache_gbs`, over the bytes of the smaller ones), or, for a
  device whose profile states no scheme, by address over the bytes crossing;
- first use: the buffers a device maps on their first use (`map_us` each), a cost of the first decode only: kept
  out of the total (a warm decode's) and evaluated as `first`, the first decode's addition;
- contention: after a split on a backend whose workers share the CPU's cores and keep spinning (OpenBLAS), the
  next CPU split runs slower by `contention` for at most `spin_ms`: contention x min(its scaled time, spin_ms).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kzlab.analysis.predict.draws import Draws

BATCH = 4096  # draws evaluated at once: bounds the (draws x nodes) matrices
#: fixed terms priced per count (their parameter in us a count); the others are bytes over a GB/s
COUNTED = ("sync", "flush", "first")
#: the output a fixed term adds to, where it is not its own kind: a whole-cache flush is cache maintenance
SUMMED_AS = {"flush": "cache"}


@dataclass
class CpuTerm:
    """How CPU node times scale: `scale` (fixed), or from a baseline total `baseline` with a `skew` parameter."""

    mode: str  # "fixed": x scale; "profile": x spread parameter; "baseline": B / (k M + j L + R), skews k, j
    scale: float = 1.0
    baseline: str = ""  # parameter name (baseline ms) or spread parameter name ("profile" mode)
    skew: str = ""  # parameter name, or "" for no skew
    profile_mm_ms: float = 0.0  # the whole CPU profile's MUL_MAT time (normalised to its wall)
    profile_rest_ms: float = 0.0  # the rest of it (its libm ops' time included)
    #: the libm ops' skew (parameter name, "" for none: the device's CPU computes them as this machine's does)
    libm: str = ""
    profile_libm_ms: float = 0.0  # the whole CPU profile's time in ops that call libm per element (LIBM_OPS)

    def factors(self, value: Callable[[str], Any], one: Any) -> tuple[Any, Any, Any]:
        """(scale of every CPU node, extra factor of its MUL_MATs, extra factor of its libm ops); `value(name)` is a
        parameter's value, a number or an array of draws, `one` the neutral factor of the same kind."""
        k = value(self.skew) if self.skew else one
        j = value(self.libm) if self.libm else one
        if self.mode == "baseline":
            rest = self.profile_rest_ms - self.profile_libm_ms
            return value(self.baseline) / (k * self.profile_mm_ms + j * self.profile_libm_ms + rest), k, j
        if self.mode == "profile":
            return value(self.baseline), one, j
        return self.scale * one, one, j


def cpu_node_factors(mm: np.ndarray, libm: np.ndarray, k: np.ndarray, j: np.ndarray) -> np.ndarray:
    """(draws x CPU nodes) factors besides the scale: k on the MUL_MATs, j on the libm ops, 1 elsewhere."""
    return np.where(mm[None, :], k[:, None], np.where(libm[None, :], j[:, None], 1.0))


@dataclass
class _Rows:
    """Rows of one group as arrays (`values`), with their one-hot stage and backend matrices."""

    values: tuple[np.ndarray, ...]
    s_hot: np.ndarray
    b_hot: np.ndarray

    @classmethod
    def of(cls, values: tuple[list[float], ...], stage: list[int], backend: list[int], ns: int, nb: int) -> _Rows:
        s_hot, b_hot = np.zeros((len(stage), ns)), np.zeros((len(backend), nb))
        s_hot[np.arange(len(stage)), stage] = 1.0
        b_hot[np.arange(len(backend)), backend] = 1.0
        return cls(tuple(np.asarray(v, dtype=np.float64) for v in values), s_hot, b_hot)


@dataclass
class _Compiled:
    """A CostModel's rows grouped by the parameters they read (`key`: the row counts it was built for)."""

    key: tuple[int, ...]
    cpu: _Rows | None
    cpu_mm: np.ndarray
    cpu_libm: np.ndarray
    roof: list[tuple[tuple[str, str, str], _Rows]]
    meas: list[tuple[str, _Rows]]
    rel: list[tuple[str, _Rows, np.ndarray, np.ndarray]]  # parameter, rows, MUL_MAT and libm flags
    splits: list[tuple[tuple[str, str], np.ndarray]]
    contention: list[tuple[tuple[str, str], _Rows]]

    @classmethod
    def of(cls, m: CostModel, key: tuple[int, ...]) -> _Compiled:
        ns, nb = len(m.stages), len(m.backends)

        def pick(idx: list[int], *cols: list) -> list[list]:
            return [[c[i] for i in idx] for c in cols]

        cpu = _Rows.of((m.cpu_ms,), m.cpu_stage, m.cpu_backend, ns, nb) if m.cpu_ms else None
        keys = list(zip(m.roof_rate_p, m.roof_bw_p, m.roof_launch_p, strict=True))
        roof = []
        for k in dict.fromkeys(keys):
            idx = [i for i, x in enumerate(keys) if x == k]
            flops, nbytes, stage, backend = pick(idx, m.roof_flops, m.roof_bytes, m.roof_stage, m.roof_backend)
            roof.append((k, _Rows.of((flops, nbytes), stage, backend, ns, nb)))
        meas = []
        for name in dict.fromkeys(m.meas_p):
            idx = [i for i, x in enumerate(m.meas_p) if x == name]
            ms, stage, backend = pick(idx, m.meas_ms, m.meas_stage, m.meas_backend)
            meas.append((name, _Rows.of((ms,), stage, backend, ns, nb)))
        rel = []
        for name in dict.fromkeys(m.rel_p):
            idx = [i for i, x in enumerate(m.rel_p) if x == name]
            ms, mm, libm, stage, backend = pick(idx, m.rel_ms, m.rel_mm, m.rel_libm, m.rel_stage, m.rel_backend)
            rel.append((name, _Rows.of((ms,), stage, backend, ns, nb), np.asarray(mm, dtype=bool),
                        np.asarray(libm, dtype=bool)))
        splits: dict[tuple[str, str], np.ndarray] = {}
        for kind, amount, name, stage in m.split_terms:
            splits.setdefault((kind, name), np.zeros(ns))[stage] += amount
        contention = []
        ckeys = [t[3:] for t in m.contention_terms]
        cols = [[t[j] for t in m.contention_terms] for j in range(3)]  # ms, stage, backend
        for k in dict.fromkeys(ckeys):
            ms, stage, backend = pick([i for i, x in enumerate(ckeys) if x == k], *cols)
            contention.append((k, _Rows.of((ms,), stage, backend, ns, nb)))
        return cls(key, cpu, np.asarray(m.cpu_mm, dtype=bool), np.asarray(m.cpu_libm, dtype=bool), roof, meas,
                   rel, list(splits.items()), contention)


@dataclass
class CostModel:
    """The compiled terms of one prediction. Row arrays are parallel; `*_p` hold parameter names."""

    stages: list[str]
    backends: list[str]
    cpu: CpuTerm
    # CPU nodes
    cpu_ms: list[float] = field(default_factory=list)
    cpu_mm: list[bool] = field(default_factory=list)
    cpu_libm: list[bool] = field(default_factory=list)  # an op that calls libm per element (LIBM_OPS)
    cpu_stage: list[int] = field(default_factory=list)
    cpu_backend: list[int] = field(default_factory=list)
    # roofline nodes
    roof_flops: list[float] = field(default_factory=list)
    roof_bytes: list[float] = field(default_factory=list)
    roof_rate_p: list[str] = field(default_factory=list)
    roof_bw_p: list[str] = field(default_factory=list)
    roof_launch_p: list[str] = field(default_factory=list)
    roof_stage: list[int] = field(default_factory=list)
    roof_backend: list[int] = field(default_factory=list)
    # measured device nodes
    meas_ms: list[float] = field(default_factory=list)
    meas_p: list[str] = field(default_factory=list)
    meas_stage: list[int] = field(default_factory=list)
    meas_backend: list[int] = field(default_factory=list)
    # device nodes priced as the host CPU's profiled time x the backend's cpu_relative (x the CPU's own factors)
    rel_ms: list[float] = field(default_factory=list)
    rel_mm: list[bool] = field(default_factory=list)
    rel_libm: list[bool] = field(default_factory=list)
    rel_p: list[str] = field(default_factory=list)
    rel_stage: list[int] = field(default_factory=list)
    rel_backend: list[int] = field(default_factory=list)
    # fixed terms: (kind, amount, parameter, stage): sync (amount: splits), copy or cache (amount: bytes), flush
    # (amount: whole-cache flushes, priced with cache maintenance); first (amount: buffers mapped on first use, the
    # first decode's addition, not in the total)
    split_terms: list[tuple[str, float, str, int]] = field(default_factory=list)
    # contention: (the next CPU split's profiled ms, its stage, its backend, contention parameter, spin parameter)
    contention_terms: list[tuple[float, int, int, str, str]] = field(default_factory=list)
    _cache: _Compiled | None = field(default=None, init=False, repr=False, compare=False)

    def stage_index(self, stage: str) -> int:
        if stage not in self.stages:
            self.stages.append(stage)
        return self.stages.index(stage)

    def backend_index(self, backend: str) -> int:
        if backend not in self.backends:
            self.backends.append(backend)
        return self.backends.index(backend)

    def parameter_names(self) -> set[str]:
        names = set(self.roof_rate_p) | set(self.roof_bw_p) | set(self.roof_launch_p) | set(self.meas_p)
        names |= set(self.rel_p)
        names |= {t[2] for t in self.split_terms}
        names |= {n for t in self.contention_terms for n in t[3:]}
        names |= {n for n in (self.cpu.baseline, self.cpu.skew, self.cpu.libm) if n}
        return names

    # ---- evaluation ---------------------------------------------------------------------------------------------
    def evaluate(self, draws: Draws, parts: bool = True) -> dict[str, np.ndarray]:
        """Times in ms for every draw: `total` (D,), a warm decode's, and with `parts` `by_stage` (D, S),
        `by_backend` (D, B), `copy`, `sync`, `cache` and `first` (D,): what a first decode adds to the total."""
        c = self._compiled()
        col = {n: i for i, n in enumerate(draws.names)}
        outs = [self._evaluate(c, draws.theta[i:i + BATCH], col, parts) for i in range(0, len(draws), BATCH)]
        return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}

    def _compiled(self) -> _Compiled:
        """The rows as arrays grouped by the parameters they read, built once (a calibration prices the same
        model for tens of thousands of draws, in batches)."""
        key = (len(self.cpu_ms), len(self.roof_flops), len(self.meas_ms), len(self.rel_ms), len(self.split_terms),
               len(self.contention_terms), len(self.stages), len(self.backends))
        if self._cache is None or self._cache.key != key:
            self._cache = _Compiled.of(self, key)
        return self._cache

    def _evaluate(self, c: _Compiled, theta: np.ndarray, col: dict[str, int], parts: bool) -> dict[str, np.ndarray]:
        d = theta.shape[0]
        by_stage = np.zeros((d, len(self.stages)))
        by_backend = np.zeros((d, len(self.backends)))
        nodes = np.zeros(d)

        def add(ms: np.ndarray, group: _Rows) -> None:
            if parts:
                by_stage[:] += ms @ group.s_hot
                by_backend[:] += ms @ group.b_hot
            else:
                nodes[:] += ms.sum(axis=1)

        s, k, j = self.cpu.factors(lambda n: theta[:, col[n]], np.ones(d))
        for (c_p, spin_p), rows in c.contention:  # the CPU split after a spinning backend's, slowed
            t = np.minimum(s[:, None] * rows.values[0][None, :], theta[:, col[spin_p]][:, None])
            add(theta[:, col[c_p]][:, None] * t, rows)
        if c.cpu is not None:  # CPU nodes
            base = c.cpu.values[0]
            add(s[:, None] * cpu_node_factors(c.cpu_mm, c.cpu_libm, k, j) * base[None, :], c.cpu)
        for (rate_p, bw_p, launch_p), rows in c.roof:  # roofline nodes: each group reads three columns
            flops, nbytes = rows.values
            rate, bw, launch = theta[:, col[rate_p]], theta[:, col[bw_p]], theta[:, col[launch_p]]
            t = np.maximum(flops[None, :] / (rate[:, None] * 1e9), nbytes[None, :] / (bw[:, None] * 1e9))
            add(t * 1e3 + launch[:, None] / 1e3, rows)
        for name, rows in c.meas:  # measured device nodes x their spread
            add(theta[:, col[name]][:, None] * rows.values[0][None, :], rows)
        for name, rows, mm, libm in c.rel:  # device nodes at the host CPU's time x the backend's factor
            f = (theta[:, col[name]] * s)[:, None] * cpu_node_factors(mm, libm, k, j)
            add(f * rows.values[0][None, :], rows)
        out = {"sync": np.zeros(d), "copy": np.zeros(d), "cache": np.zeros(d), "first": np.zeros(d)}
        for (kind, name), amounts in c.splits:  # per stage: counts (sync, flush, first: us each) or bytes (GB/s)
            v = theta[:, col[name]]
            per = v / 1e3 if kind in COUNTED else 1e-6 / v  # ms per count, or ms per byte
            t = per[:, None] * amounts[None, :]
            out[SUMMED_AS.get(kind, kind)] += t.sum(axis=1)
            if kind != "first":  # a warm decode's stages; the first decode's mappings stay apart
                by_stage[:] += t
        total = (by_backend.sum(axis=1) if parts else nodes) + out["sync"] + out["copy"] + out["cache"]
        if not parts:
            return {"total": total}
        return {"total": total, "by_stage": by_stage, "by_backend": by_backend, **out}

    def to_dict(self) -> dict[str, Any]:
        """How many rows each term prices (for a reader of the JSON; the arrays stay in memory)."""
        kinds = {k: sum(1 for t in self.split_terms if t[0] == k) for k in ("sync", "copy", "cache", "flush", "first")}
        return {"cpu_nodes": len(self.cpu_ms), "roofline_nodes": len(self.roof_flops),
                "measured_nodes": len(self.meas_ms), "cpu_relative_nodes": len(self.rel_ms), "split_terms": kinds,
                "cpu_mode": self.cpu.mode,
                "contention_terms": len(self.contention_terms)}
