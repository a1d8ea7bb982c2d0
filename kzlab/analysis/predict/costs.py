"""A placement's time as a function of the parameters, compiled once and evaluated for many draws at once.

The time model (`timing.predict`) walks the placement once and records, for every node and split, which term
prices it and which parameters that term reads. `CostModel.evaluate` then prices all draws of the parameters
in a few array operations (draws x nodes), so a distribution of a few thousand draws costs milliseconds and no
second simulation. The terms are kept apart on purpose, so that device totals of different placements can tell
them apart (a calibration fits them jointly):

- CPU nodes: their profiled time x the CPU's scale (from the device's CPU-only total when given: the total is
  reproduced for any `matmul_skew`, which moves time between the CPU's MUL_MATs and the rest);
- device nodes: a roofline max(FLOPs / rate(op, type), bytes / bandwidth) + a per-node dispatch (`launch_us`),
  or a measured op time x its spread;
- splits: a per-split round trip (`sync_us`), input copies into a buffer that is not host-visible
  (`copy_gbs`), and cache maintenance of the bytes that cross a shared, non-coherent buffer (`cache_gbs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kzlab.analysis.predict.draws import Draws

BATCH = 4096  # draws evaluated at once: bounds the (draws x nodes) matrices


@dataclass
class CpuTerm:
    """How CPU node times scale: `scale` (fixed), or from a baseline total `baseline` with a `skew` parameter."""

    mode: str  # "fixed": x scale; "profile": x spread parameter; "baseline": B / (k M + R) with skew k
    scale: float = 1.0
    baseline: str = ""  # parameter name (baseline ms) or spread parameter name ("profile" mode)
    skew: str = ""  # parameter name, or "" for no skew
    profile_mm_ms: float = 0.0  # the whole CPU profile's MUL_MAT time (normalised to its wall)
    profile_rest_ms: float = 0.0


@dataclass
class CostModel:
    """The compiled terms of one prediction. Row arrays are parallel; `*_p` hold parameter names."""

    stages: list[str]
    backends: list[str]
    cpu: CpuTerm
    # CPU nodes
    cpu_ms: list[float] = field(default_factory=list)
    cpu_mm: list[bool] = field(default_factory=list)
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
    # splits: (kind, amount, parameter, stage): kind sync (amount 1), copy or cache (amount bytes)
    split_terms: list[tuple[str, float, str, int]] = field(default_factory=list)

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
        names |= {t[2] for t in self.split_terms}
        names |= {n for n in (self.cpu.baseline, self.cpu.skew) if n}
        return names

    # ---- evaluation ---------------------------------------------------------------------------------------------
    def evaluate(self, draws: Draws, parts: bool = True) -> dict[str, np.ndarray]:
        """Times in ms for every draw: `total` (D,), and with `parts` `by_stage` (D, S), `by_backend` (D, B),
        `copy`, `sync`, `cache` (D,)."""
        outs = [self._evaluate(draws.theta[i:i + BATCH], draws.names, parts) for i in range(0, len(draws), BATCH)]
        return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}

    def _col(self, theta: np.ndarray, names: list[str], name: str) -> np.ndarray:
        return theta[:, names.index(name)]

    def _evaluate(self, theta: np.ndarray, names: list[str], parts: bool) -> dict[str, np.ndarray]:
        d = theta.shape[0]
        ns, nb = len(self.stages), len(self.backends)
        by_stage = np.zeros((d, ns))
        by_backend = np.zeros((d, nb))

        def add(ms: np.ndarray, stage: list[int], backend: list[int]) -> None:
            if ms.shape[1] == 0:
                return
            s_hot = np.zeros((len(stage), ns))
            s_hot[np.arange(len(stage)), stage] = 1.0
            b_hot = np.zeros((len(backend), nb))
            b_hot[np.arange(len(backend)), backend] = 1.0
            by_stage[:] += ms @ s_hot
            by_backend[:] += ms @ b_hot

        # CPU nodes
        if self.cpu_ms:
            base = np.asarray(self.cpu_ms)
            mm = np.asarray(self.cpu_mm, dtype=bool)
            c = self.cpu
            if c.mode == "baseline":
                k = self._col(theta, names, c.skew) if c.skew else np.ones(d)
                b = self._col(theta, names, c.baseline)
                s = b / (k * c.profile_mm_ms + c.profile_rest_ms)
            elif c.mode == "profile":
                s, k = self._col(theta, names, c.baseline), np.ones(d)
            else:
                s, k = np.full(d, c.scale), np.ones(d)
            ms = s[:, None] * np.where(mm[None, :], k[:, None] * base[None, :], base[None, :])
            add(ms, self.cpu_stage, self.cpu_backend)
        # roofline nodes: grouped by their parameters, so each group reads three columns
        if self.roof_flops:
            flops, nbytes = np.asarray(self.roof_flops), np.asarray(self.roof_bytes)
            ms = np.empty((d, len(flops)))
            keys = list(zip(self.roof_rate_p, self.roof_bw_p, self.roof_launch_p, strict=True))
            for key in dict.fromkeys(keys):
                idx = np.array([i for i, k in enumerate(keys) if k == key])
                rate, bw, launch = (self._col(theta, names, n) for n in key)
                t = np.maximum(flops[idx][None, :] / (rate[:, None] * 1e9), nbytes[idx][None, :] / (bw[:, None] * 1e9))
                ms[:, idx] = t * 1e3 + launch[:, None] / 1e3
            add(ms, self.roof_stage, self.roof_backend)
        if self.meas_ms:
            base = np.asarray(self.meas_ms)
            ms = np.empty((d, len(base)))
            for name in dict.fromkeys(self.meas_p):
                idx = np.array([i for i, n in enumerate(self.meas_p) if n == name])
                ms[:, idx] = self._col(theta, names, name)[:, None] * base[idx][None, :]
            add(ms, self.meas_stage, self.meas_backend)
        out = {"sync": np.zeros(d), "copy": np.zeros(d), "cache": np.zeros(d)}
        for kind, amount, pname, stage in self.split_terms:
            v = self._col(theta, names, pname)
            t = v / 1e3 if kind == "sync" else amount / (v * 1e9) * 1e3
            out[kind] += t
            by_stage[:, stage] += t
        total = by_backend.sum(axis=1) + out["sync"] + out["copy"] + out["cache"]
        if not parts:
            return {"total": total}
        return {"total": total, "by_stage": by_stage, "by_backend": by_backend, **out}

    def to_dict(self) -> dict[str, Any]:
        """How many rows each term prices (for a reader of the JSON; the arrays stay in memory)."""
        kinds = {k: sum(1 for t in self.split_terms if t[0] == k) for k in ("sync", "copy", "cache")}
        return {"cpu_nodes": len(self.cpu_ms), "roofline_nodes": len(self.roof_flops),
                "measured_nodes": len(self.meas_ms), "split_terms": kinds, "cpu_mode": self.cpu.mode}
