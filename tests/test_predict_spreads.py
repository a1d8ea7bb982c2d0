"""The measured spreads a prediction carries come from the measurements themselves: a profile's own repeat walls,
a CPU-only baseline's runs, the op rows' observed spread, each calibration total's runs and the model's
discrepancy between configurations (leave-one-out); bench-ops' per-split cost is measured around a product
that wakes the BLAS library's threads."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import TINY

import kzlab
from kzlab.analysis.predict.costs import CostModel, CpuTerm
from kzlab.analysis.predict.draws import ParameterSpace
from kzlab.analysis.predict.inference import infer
from kzlab.analysis.predict.parameters import MEASURED_SPREAD, Parameter, backend_perf, observed_spread
from kzlab.analysis.predict.timing import OP_SPREAD, predict
from kzlab.errors import InvalidInputError

F32 = TINY / "qwentts-tokenizer-f32.gguf"
PORTABLE = kzlab.Lowering.preset("device")  # the graph the simulator places, on the CPU too
FRAMES = 4


@pytest.fixture(scope="module")
def model():
    return kzlab.load_model(F32)


@pytest.fixture(scope="module")
def cpu_profile(model):
    return kzlab.profile(model, frames=FRAMES, backend="cpu", lowering=PORTABLE, repeat=2, warmup=1, peak=False,
                         progress=False, threads=1).to_dict()


def with_walls(profile: dict, factors: list[float]) -> dict:
    """The profile with its plain repeat walls set to `factors` x its wall (as if the machine had moved so)."""
    cfg = dict(profile["config"], wall_all_ms=[profile["wall_ms"] * f for f in factors])
    return {**profile, "config": cfg}


def cpu_width(pred) -> float:
    r = pred.backend_ranges["CPU"]
    return (r["p90"] - r["p10"]) / r["p50"]


def test_observed_spread():
    assert observed_spread([100.0, 110.0, 90.0]) == pytest.approx(0.1)
    assert observed_spread([100.0, 120.0]) == pytest.approx(10 / 110)  # median of two: their mean
    assert observed_spread([5.0]) is None and observed_spread([]) is None and observed_spread(None) is None


def test_a_profile_with_a_wide_observed_spread_gives_a_wider_band(model, cpu_profile):
    from helpers import cpu_perf_at_this_machines_libm

    tight = with_walls(cpu_profile, [1.0, 1.01, 0.99, 1.0])
    wide = with_walls(cpu_profile, [1.0, 1.3, 0.8, 1.0])
    preds = {}
    for name, prof in (("tight", tight), ("wide", wide)):
        pl = kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE,
                            predict={"cpu_profile": prof, "draws": 2000, "seed": 2,
                                     "perf": {"CPU": cpu_perf_at_this_machines_libm()}})
        preds[name] = pl.predicted
    spread = {k: next(q for q in p.parameters if q.name == "cpu.profile_spread") for k, p in preds.items()}
    assert spread["tight"].low == pytest.approx(0.99) and spread["tight"].high == pytest.approx(1.01)
    assert spread["wide"].low == pytest.approx(0.7) and spread["wide"].high == pytest.approx(1.3)
    assert "repeat walls" in spread["wide"].source
    # the CPU part spans the observed spread: a log-uniform over [0.7, 1.3] has p10-p90 of about 48 % of p50
    lo, hi = 0.7, 1.3
    q = [math.exp(math.log(lo) + f * math.log(hi / lo)) for f in (0.1, 0.5, 0.9)]
    assert cpu_width(preds["wide"]) == pytest.approx((q[2] - q[0]) / q[1], rel=0.1)
    assert cpu_width(preds["wide"]) > 10 * cpu_width(preds["tight"])
    # one timed run: nothing observed, the stated default stays
    one = with_walls(cpu_profile, [1.0])
    pl = kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE, predict={"cpu_profile": one, "draws": 50})
    p = next(q for q in pl.predicted.parameters if q.name == "cpu.profile_spread")
    assert p.high == pytest.approx(1 + MEASURED_SPREAD) and "stated" in p.source


def test_a_baseline_given_as_its_runs_carries_their_spread(model, cpu_profile):
    def baseline(**opts):
        pl = kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE,
                            predict={"cpu_profile": cpu_profile, "draws": 50, **opts})
        return next(q for q in pl.predicted.parameters if q.name == "cpu.baseline_ms")

    one = baseline(cpu_baseline_ms=200.0)
    assert (one.value, one.low, one.high) == pytest.approx((200.0, 200 * (1 - MEASURED_SPREAD),
                                                            200 * (1 + MEASURED_SPREAD)))
    runs = baseline(cpu_baseline_ms=[190.0, 200.0, 230.0])
    assert (runs.value, runs.low, runs.high) == pytest.approx((200.0, 170.0, 230.0))
    assert "observed over its 3 runs" in runs.source
    given = baseline(cpu_baseline_ms=200.0, cpu_baseline_spread=0.1)
    assert (given.low, given.high) == pytest.approx((180.0, 220.0))
    with pytest.raises(InvalidInputError, match="run"):
        baseline(cpu_baseline_ms=[200.0, 0.0])
    with pytest.raises(InvalidInputError, match="spread"):
        baseline(cpu_baseline_ms=200.0, cpu_baseline_spread=1.5)
    with pytest.raises(InvalidInputError, match="cpu_baseline_ms too"):
        baseline(cpu_baseline_spread=0.1)


def test_measured_op_rows_carry_the_spread_given():
    perf = backend_perf("HTP", {"sync_us": 50.0, "source": "measured in a test"}, "test")
    node = {"name": "x:ADD", "op": "ADD", "backend": "HTP", "stage": "s", "flops": 1e6, "bytes": 4e6,
            "src_types": ["F32"]}
    measured = {"htp": lambda n: SimpleNamespace(time_us=10_000.0, how="exact")}  # 10 ms, as a log would say
    default = predict([node], [], {"frames": 1}, {"htp": perf}, measured=measured, draws=2000)
    wide = predict([node], [], {"frames": 1}, {"htp": perf}, measured=measured, draws=2000, ops_spread=0.4)
    p = {k: next(q for q in v.parameters if q.name == "HTP.measured_ops") for k, v in
         (("default", default), ("wide", wide))}
    assert p["default"].high == pytest.approx(1 + OP_SPREAD) and "stated" in p["default"].source
    assert (p["wide"].low, p["wide"].high) == pytest.approx((0.6, 1.4)) and "observed" in p["wide"].source
    assert wide.range["min"] >= 6.0 - 1e-9 and wide.range["max"] <= 14.0 + 1e-9
    assert wide.range["p90"] - wide.range["p10"] > 3 * (default.range["p90"] - default.range["p10"])
    with pytest.raises(InvalidInputError, match="ops_spread"):
        predict([node], [], {"frames": 1}, {"htp": perf}, measured=measured, ops_spread=-0.1)


def _one_term(ms: float) -> CostModel:
    """A configuration whose total is `ms` x the parameter `a` (one measured term)."""
    cm = CostModel(["s"], ["D"], CpuTerm("fixed"))
    cm.meas_ms, cm.meas_p, cm.meas_stage, cm.meas_backend = [ms], ["a"], [0], [0]
    return cm


def test_calibration_noise_per_measurement_and_leave_one_out_discrepancy():
    space = ParameterSpace()
    space.add([Parameter("a", 1.0, "x", "assumed: a test", 0.3, 3.0)])
    models = {"c1": _one_term(100.0), "c2": _one_term(200.0), "c3": _one_term(300.0)}
    # two totals the one-parameter model cannot both reproduce: a = 1 says c1, a = 1.5 says c2
    measured = {"c1": 100.0, "c2": 300.0}
    plain = infer(models, space, measured, n=2000, seed=0, flag_bounds=False)
    loo = infer(models, space, measured, n=2000, seed=0, flag_bounds=False, discrepancy="loo")
    # left out in turn, each is predicted from the other alone: log(300 / 200) and log(100 / 150)
    assert loo.leave_one_out["c2"] == pytest.approx(math.log(1.5), abs=0.03)
    assert loo.leave_one_out["c1"] == pytest.approx(math.log(100 / 150), abs=0.03)
    assert loo.discrepancy == pytest.approx(math.log(1.5), abs=0.03)
    assert loo.noises["c1"] == pytest.approx(math.hypot(MEASURED_SPREAD, loo.discrepancy))

    def width(post):
        t = post.predict(models["c3"])
        q10, q50, q90 = np.percentile(t, [10, 50, 90])
        return (q90 - q10) / q50

    assert plain.discrepancy == 0.0 and width(plain) < 0.1  # overconfident: +-3 % on an inconsistent pair
    assert width(loo) > 5 * width(plain)
    assert "discrepancy" in loo.summary() and loo.to_dict()["discrepancy"] == loo.discrepancy
    # a measurement with a wide observed spread weighs less: the posterior follows the other
    noisy = infer(models, space, measured, n=2000, seed=0, flag_bounds=False, noise={"c1": 0.01, "c2": 0.5})
    assert float(np.median(noisy.draws.column("a"))) == pytest.approx(1.0, rel=0.05)
    with pytest.raises(InvalidInputError, match="two or more"):
        infer(models, space, {"c1": 100.0}, n=100, discrepancy="loo")
    with pytest.raises(InvalidInputError, match="noise of c2"):
        infer(models, space, measured, n=100, noise={"c1": 0.03, "c2": 2.0})


def test_bench_ops_fixed_costs_wake_the_threaded_library():
    """BLAS's per-split cost is timed around a product big enough for OpenBLAS to thread (and so to wake its
    workers), the product's and the CPU split's own times taken off; the CPU backend alone has no switch."""
    from ggml import ggml as g

    from kzlab.analysis.predict.bench_ops import THREADED_SIDE, measure_fixed_costs
    from kzlab.runtime.backends import init_backend

    # OpenBLAS interface/gemm.c threads a product from M*N*K >= 65536 * GEMM_MULTITHREAD_THRESHOLD (4)
    assert THREADED_SIDE ** 3 >= 65536 * 4 * 4
    blas, cpu = init_backend("blas", 2), init_backend("cpu", 2)
    try:
        alone = measure_fixed_costs(cpu.handle, runs=20)
        fixed = measure_fixed_costs(blas.handle, runs=40, cpu_handle=cpu.handle)
    finally:
        g.ggml_backend_free(blas.handle)
        g.ggml_backend_free(cpu.handle)
    assert "threaded" not in alone["sync_how"] and alone["sync_us"] > 0
    assert f"threaded product ({THREADED_SIDE}^3 F32)" in fixed["sync_how"] and "rounds" in fixed["sync_how"]
    assert fixed["sync_us"] > 0 and fixed["copy_gbs"] > 0 and fixed["sync_spread"] >= 0
    # the [perf] table bench-ops writes reads back (how it was measured is its source, not an unknown key)
    perf = backend_perf("BLAS", {"source": "measured here", "sync_us": fixed["sync_us"],
                                 "copy_gbs": fixed["copy_gbs"], "sources": {"sync_us": fixed["sync_how"]}}, "test")
    assert perf.sync_us.value == fixed["sync_us"] and "threaded" in perf.sync_us.source
