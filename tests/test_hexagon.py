"""The Hexagon as its source has it: each product's kernel path (HMX or HVX) per ggml version, the HMX option,
rates per path and per op class, what-ifs on the profile (+OP, -OP, hmx=0), stages under the scheduler with
measurements of a stage, a calibration that checks itself against public measurements, and what reaching a
target would take.

The facts each case checks are cited where the rule is (kzlab/analysis/placement/rules.py, the profiles'
comments): ggml-org/ggml 707321c4 (v0.15.2), eced84c8 (v0.15.3), 8599e0ea (v0.21.0), 78c531d4.
"""

from __future__ import annotations

import json

import pytest
from conftest import TINY, ask_whatif, truth_draws
from ggml import ggml as g

import kzlab
from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.capabilities import with_changes
from kzlab.analysis.predict.draws import ParameterSpace
from kzlab.analysis.predict.inference import infer
from kzlab.errors import InvalidInputError, InvalidOptionError

F32 = TINY / "qwentts-tokenizer-f32.gguf"
FRAMES = 4


pytestmark = pytest.mark.usefixtures("isolated_cache")


@pytest.fixture(scope="module")
def model():
    return kzlab.load_model(F32)


class NoBuffers:
    def buffer_kind(self, t):
        return None


def _product(ctx, k: int, n: int, rows: int, wtype=g.GGML_TYPE_F16, xtype=g.GGML_TYPE_F32):
    return g.ggml_mul_mat(ctx, g.ggml_new_tensor_2d(ctx, wtype, k, n), g.ggml_new_tensor_2d(ctx, xtype, k, rows))


@pytest.fixture
def ctx():
    c = g.ggml_init(g.ggml_init_params(mem_size=64 * 1024 * 1024, mem_buffer=None, no_alloc=True))
    yield c
    g.ggml_free(c)


F16, Q8 = g.GGML_TYPE_F16, g.GGML_TYPE_Q8_0


@pytest.mark.parametrize("profile,k,n,rows,wtype,xtype,path", [
    # v0.15.2: the DSP decides (htp/matmul-ops.c 707321c4 lines 4710-4822): rows >= 32, N % 32, K % 32 (F16)
    ("hexagon-v0.15.2", 64, 64, 32, F16, g.GGML_TYPE_F32, "hmx"),
    ("hexagon-v0.15.2", 64, 64, 31, F16, g.GGML_TYPE_F32, "hvx"),
    ("hexagon-v0.15.2", 64, 48, 64, F16, g.GGML_TYPE_F32, "hvx"),
    ("hexagon-v0.15.2", 64, 64, 64, F16, g.GGML_TYPE_F16, "hmx"),  # no src1 type check on the DSP
    ("hexagon-v0.15.2", 64, 64, 64, g.GGML_TYPE_F32, g.GGML_TYPE_F32, "hmx"),  # F32 x F32 takes HMX too
    ("hexagon-v0.15.2", 64, 64, 64, Q8, g.GGML_TYPE_F32, "hvx"),  # quantized: K % 256 on the DSP
    ("hexagon-v0.15.2", 256, 64, 64, Q8, g.GGML_TYPE_F32, "hmx"),
    # v0.15.3 on: the host decides (ggml_hexagon_matmul_is_hmx_eligible): rows > 4
    ("hexagon-v0.15.3", 64, 64, 5, F16, g.GGML_TYPE_F32, "hmx"),
    ("hexagon-v0.15.3", 64, 64, 4, F16, g.GGML_TYPE_F32, "hvx"),
    ("hexagon-v0.15.3", 64, 64, 64, F16, g.GGML_TYPE_F16, "hmx"),
    ("hexagon-v0.15.3", 64, 64, 64, Q8, g.GGML_TYPE_F32, "hmx"),
    ("hexagon-v0.21.0", 64, 64, 64, F16, g.GGML_TYPE_F16, "hmx"),
    # 78c531d4 lines 2217-2221: HMX takes F32 activations only
    ("hexagon-78c531d", 64, 64, 64, F16, g.GGML_TYPE_F16, "hvx"),
    ("hexagon-78c531d", 64, 64, 64, F16, g.GGML_TYPE_F32, "hmx"),
])
def test_product_paths_per_version(ctx, profile, k, n, rows, wtype, xtype, path):
    caps = capabilities.load(profile)
    t = _product(ctx, k, n, rows, wtype, xtype)
    assert caps.kernel_path(t, NoBuffers()) == path
    assert caps.options["hmx"] is True  # on by default, as in the source
    off = with_changes(caps, {"hmx": "0"})
    assert off.kernel_path(t, NoBuffers()) == "hvx" and off.label.endswith("(hmx=off)")


def test_hmx_accepts_what_the_hvx_kernels_would_not(ctx):
    """0.15.3: an HMX-eligible product is accepted whatever the HVX DDR kernel needs; with HMX off the VTCM gate
    refuses it; past what the HMX solver fits (`hmx_k_max`) it is judged by the HVX kernels again."""
    caps = capabilities.load("hexagon-v0.15.3")
    t = _product(ctx, 10944, 64, 512)  # HVX DDR kernel: 8404992 B > 8 MiB
    assert caps.refusal(t, NoBuffers()) is None
    why = with_changes(caps, {"hmx": "off"}).refusal(t, NoBuffers())
    assert why is not None and "hvx-ddr VTCM need" in why[1] and "HMX off" in why[1]
    big = _product(ctx, 18048 + 32, 64, 512)
    assert caps.kernel_path(big, NoBuffers()) == "hvx" and caps.refusal(big, NoBuffers()) is not None


def test_profile_what_ifs_are_validated():
    caps = capabilities.load("hexagon-v0.15.3")
    sin = with_changes(caps, add=["SIN"], remove=["CONCAT"])
    assert sin.ops["SIN"] == [] and sin.ops["CONCAT"][0][0] == "never" and sin.changes == ["+SIN", "-CONCAT"]
    assert "SIN" not in caps.ops  # the profile as read is unchanged
    with pytest.raises(InvalidOptionError, match="not an op of this ggml.*known: .*SIN"):
        with_changes(caps, add=["SINE"])
    with pytest.raises(InvalidOptionError, match="already lists MUL_MAT"):
        with_changes(caps, add=["MUL_MAT"])
    with pytest.raises(InvalidOptionError, match="unknown option 'hmxx'.*hmx"):
        with_changes(caps, {"hmxx": "1"})
    with pytest.raises(InvalidOptionError, match="expected on/off"):
        with_changes(caps, {"hmx": "maybe"})
    with pytest.raises(InvalidOptionError, match="unknown option"):
        with_changes(capabilities.load("blas"), {"hmx": "0"})


def test_newest_release_and_the_later_commit(ctx):
    v21, c78 = capabilities.load("hexagon-v0.21.0"), capabilities.load("hexagon-78c531d")
    assert {k: v for k, v in v21.ops.items() if k != "MUL_MAT"} == {k: v for k, v in c78.ops.items() if k != "MUL_MAT"}
    assert v21.perf == c78.perf
    # F16 activations past the HVX F16 x F16 kernel's K (16384): v0.21.0 takes them on HMX, 78c531d refuses them
    t = _product(ctx, 16416, 64, 512, F16, g.GGML_TYPE_F16)
    assert v21.refusal(t, NoBuffers()) is None and v21.kernel_path(t, NoBuffers()) == "hmx"
    why = c78.refusal(t, NoBuffers())
    assert why is not None and "hvx-ddr VTCM need" in why[1]
    assert v21.paths["MUL_MAT"][1].get("hmx_src1_f32") is None and c78.paths["MUL_MAT"][1]["hmx_src1_f32"]
    assert "8599e0ea" in v21.source and "78c531d4" in c78.source


def test_every_hexagon_rate_holds_its_public_figures():
    """Ranges hold what has been measured in public: the HMX range reaches past 5 TFLOP/s (llama.cpp #23368,
    #26501), the HVX F16 one goes below #18336's 3.4 GFLOP/s matvec; each public interval has its source."""
    from kzlab.analysis.predict.parameters import backend_perf

    caps = capabilities.load("hexagon-v0.15.2")
    perf = backend_perf("HTP", caps.perf, "test")
    hmx = perf.gflops["MUL_MAT.F16.hmx"]
    assert hmx.high >= 5000 and hmx.public[1] >= 20000 and "#26501" in hmx.public_source
    hvx = perf.gflops["MUL_MAT.F16.hvx"]
    assert hvx.low < 3.4 <= hvx.public[0] and "#18336" in hvx.public_source
    for p in perf.parameters():
        if p.public is not None:
            assert p.low <= p.public[0] <= p.public[1] <= p.high and p.public_source, p.name
    assert {"elementwise", "copy", "gather", "norm", "transcendental"} <= set(perf.bandwidth)


def test_placement_records_the_path_and_prices_by_it(model):
    pl = kzlab.simulate(model, "hexagon-v0.15.3", frames=FRAMES, lowering=kzlab.Lowering(wtype="f16"),
                        predict={"draws": 20})
    mm = [n for n in pl.nodes if n.op == "MUL_MAT" and n.backend == "HTP"]
    assert mm and {n.path for n in mm} <= {"hmx", "hvx"} and "hmx" in {n.path for n in mm}
    rows = [r for r in pl.predicted.nodes if r["op"] == "MUL_MAT" and r["backend"] == "HTP"]
    assert {r["rate"] for r in rows if r["path"] == "hmx"} == {"HTP.gflops.MUL_MAT.F16.hmx"}
    names = {p.name for p in pl.predicted.parameters}
    assert "HTP.gflops.MUL_MAT.F16.hmx" in names
    d = json.loads(json.dumps(pl.to_dict()))
    assert {n["path"] for n in d["nodes"] if n["op"] == "MUL_MAT" and n["backend"] == "HTP"} <= {"hmx", "hvx"}
    # streaming ops are priced by their class's bandwidth
    classes = {r["bandwidth"] for r in pl.predicted.nodes if r["how"] == "roofline" and r["op"] in ("ADD", "MUL")}
    assert classes == {"HTP.bandwidth_gbs.elementwise"}


def test_stages_under_the_scheduler(model):
    pl = kzlab.simulate(model, "hexagon-v0.15.2", frames=FRAMES, stages="decoder")
    assert pl.config["sched_stages"] == ["decoder"]
    outside = [n for n in pl.nodes if not n.stage.startswith("decoder")]
    inside = [n for n in pl.nodes if n.stage.startswith("decoder") and n.op not in ("VIEW", "RESHAPE")]
    assert outside and all(n.backend == "CPU" for n in outside)
    assert all(n.refused.get("HTP", "").startswith("stages:") for n in outside if n.op == "MUL_MAT")
    assert any(n.backend == "HTP" for n in inside)
    whole = kzlab.simulate(model, "hexagon-v0.15.2", frames=FRAMES)
    assert any(n.backend == "HTP" for n in whole.nodes if not n.stage.startswith("decoder"))
    with pytest.raises(InvalidOptionError, match="not a stage of this graph.*decoder.0"):
        kzlab.simulate(model, "hexagon-v0.15.2", frames=FRAMES, stages="bigvgan")


CONFIGS = ["v0.15.2=hexagon-v0.15.2,stages=decoder", "v0.15.3=hexagon-v0.15.3", "sin=hexagon-v0.15.3,+SIN"]


def ask(model, **kw):
    return ask_whatif(model, CONFIGS, **kw)


def test_op_support_what_if_and_needs(model):
    r = ask(model, target_ms=150.0)
    d = json.loads(json.dumps(r.to_dict()))
    sin_nodes = [n for n in r.placements["sin"].nodes if n.op == "SIN"]
    assert sin_nodes and all(n.backend == "HTP" for n in sin_nodes)
    assert all(n.backend == "CPU" for n in r.placements["v0.15.3"].nodes if n.op == "SIN")
    assert r.placements["sin"].n_splits < r.placements["v0.15.3"].n_splits
    assert d["configs"]["sin"]["profile"] == "hexagon-v0.15.3 (+SIN)"
    assert any("+SIN is a what-if" in n and "transcendental" in n for n in d["notes"])
    for name, c in d["configs"].items():
        need = c["needs"]
        assert need["target_ms"] == 150.0 and 0.0 <= need["p_now"] <= 1.0 and need["text"], name
        for one in need.get("one_parameter", []):
            assert one["op"] in (">=", "<=") and one["low"] <= one["value"] <= one["high"]
    # the stages left off the scheduler are not counted as ops the device refuses
    refused = d["configs"]["v0.15.2"]["needs"].get("refused_on_cpu_path", [])
    assert all(not any(x.startswith("stages:") for x in e["reasons"]) for e in refused)
    with pytest.raises(InvalidOptionError, match="not an op of this ggml"):
        kzlab.whatif(model, ["x=hexagon-v0.15.3,+SINE"], frames=FRAMES)
    for bad, match in (("x=hexagon-v0.15.3,+", "names no op"), ("x=hexagon-v0.15.3,stages=", "names no stage"),
                       ("x=hexagon-v0.15.3,hmxx=0", "unknown option hmxx .*hexagon-v0.15.3's options: hmx")):
        with pytest.raises(InvalidOptionError, match=match):
            kzlab.whatif(model, [bad], frames=FRAMES)


def test_a_stage_measured_is_calibrated_on(model):
    r = ask(model, measured={"cpu": 200.0, "v0.15.2": 230.0, "v0.15.2:decoder": 200.0})
    cal = r.to_dict()["calibration"]
    assert set(cal["reproduced"]) == {"cpu", "v0.15.2", "v0.15.2:decoder"}
    rep = cal["reproduced"]["v0.15.2:decoder"]
    assert rep["p10"] <= rep["p50"] <= rep["p90"] and rep["p50"] < cal["reproduced"]["v0.15.2"]["p50"]
    with pytest.raises(InvalidInputError, match="no stage of that configuration"):
        ask(model, measured={"cpu": 200.0, "v0.15.2:bigvgan": 150.0})
    with pytest.raises(InvalidInputError, match="NAME:STAGE"):
        ask(model, measured={"v0.15.2:": 150.0})


@pytest.fixture(scope="module")
def full_model(full_synth):
    from kzlab.loader import load_model

    return load_model(full_synth)


def test_fast_hmx_and_a_missing_cost_are_flagged_not_identified(full_model):
    """The truth: HMX at 8 TFLOP/s (inside what has been measured in public) plus a cost the model lacks, a pass
    over every HMX product's work at 60 GFLOP/s (operands converted and re-tiled per call, say). Totals alone (two
    configurations and the CPU-only decode, at two frame counts, the full-size graph with the seed's F16 products)
    put the HMX rate twenty times below the public figures: the answer flags it as contradicting them, with the
    candidate costs and the device command, and does not call it identified. Without the missing cost, nothing
    is flagged."""
    from helpers import cpu_perf_at_this_machines_libm

    from kzlab.analysis.profile_cache import cached_cpu_profile

    low = kzlab.Lowering(mode="portable", conv="im2col-f16", conv_src1="data")
    models, space, hidden = {}, ParameterSpace(), {}
    for frames in (2, 6):
        for name, profile, opts in (("cpu", "cpu", {}), ("v0.15.3", "hexagon-v0.15.3", {}),
                                    ("chunk", "hexagon-v0.15.3", {"mm_chunk": 256})):
            lw = low.replace(**opts)
            prof, _ = cached_cpu_profile(full_model, frames, lw, threads=1)
            pl = kzlab.simulate(full_model, profile, frames=frames, lowering=lw,
                                weights_on="cpu" if name == "cpu" else "htp",
                                predict={"cpu_profile": prof, "cpu_scale": 1.0, "draws": 10,
                                         "perf": {"CPU": cpu_perf_at_this_machines_libm()}})
            key = f"{name}@{frames}"
            models[key] = pl.predicted.costs
            space.add([q for q in pl.predicted.parameters if q.name in pl.predicted.costs.parameter_names()])
            hmx = [n for n in pl.nodes if n.op == "MUL_MAT" and n.path == "hmx" and n.src_types[0] == "F16"]
            hidden[key] = sum(n.flops for n in hmx) / 60e9 * 1e3
    assert hidden["v0.15.3@6"] > 100.0  # ms: a cost the totals must show
    truth = truth_draws(space.sample(1, 0), {"HTP.gflops.MUL_MAT.F16.hmx": 8000.0})
    measured = {k: float(m.evaluate(truth, parts=False)["total"][0]) + hidden[k] for k, m in models.items()}
    post = infer(models, space, measured, n=1000, seed=4, noise=0.02)
    assert "HTP.gflops.MUL_MAT.F16.hmx" not in post.identified, post.summary()
    flags = [f for f in post.flags if f.get("kind") == "contradicts_public"]
    assert [f["parameter"] for f in flags] == ["HTP.gflops.MUL_MAT.F16.hmx"], post.summary()
    f = flags[0]
    assert f["public"] == [1210.0, 20960.0] and f["side"] == "below" and f["factor"] >= 10
    assert "contradicts public measurements" in f["message"] and "GGML_HEXAGON_PROFILE=1" in f["command"]
    assert f["candidates"] and all(isinstance(c, str) for c in f["candidates"])
    verdict = next(p["verdict"] for p in post.parameters if p["parameter"] == "HTP.gflops.MUL_MAT.F16.hmx")
    assert verdict == "contradicts public"
    # the same truth without the missing cost: nothing contradicts the public figures
    clean = {k: float(m.evaluate(truth, parts=False)["total"][0]) for k, m in models.items()}
    post = infer(models, space, clean, n=1000, seed=4, noise=0.02)
    assert not [f for f in post.flags if f.get("kind") == "contradicts_public"], post.summary()


def test_cli_takes_stage_measurements_and_what_ifs(tmp_path, capsys):
    from kzlab.cli import main

    out = tmp_path / "w.json"
    rc = main(["whatif", str(F32), "--frames", str(FRAMES), "--cpu-baseline-ms", "200", "--threads", "1",
               "--config", CONFIGS[0], "--config", CONFIGS[2], "--target-ms", "150",
               "--measured", "cpu=200", "v0.15.2=230", "v0.15.2:decoder=200", "--draws", "200", "--json", str(out),
               "-q"])
    assert rc == 0
    d = json.loads(out.read_text())
    assert "v0.15.2:decoder" in d["calibration"]["measured"]
    assert all("needs" in c for c in d["configs"].values())
    assert all({"parameter", "kind", "public", "message"} <= set(f) for f in d["calibration"]["flags"])
    assert d["question"]["configs"]["sin"]["ops"] == ["+SIN"]
    assert "needs" in capsys.readouterr().out


def test_needs_finds_the_value_one_parameter_must_reach():
    """A placement whose total is 1000 / r ms (one product of 1 GFLOP at r GFLOP/s, r log-uniform over 10-1000):
    P(<= 5 ms) = P(r >= 200) = 0.35, and reaching it needs r >= 200, within the bisection's resolution; 0.5 ms
    would need r >= 2000, beyond its range; 20 ms is already met (P = 0.65)."""
    from kzlab.analysis.predict.costs import CostModel, CpuTerm
    from kzlab.analysis.predict.needs import needs
    from kzlab.analysis.predict.parameters import Parameter

    cm = CostModel(["s"], ["HTP"], CpuTerm("fixed"), roof_flops=[1e9], roof_bytes=[0.0], roof_rate_p=["r"],
                   roof_bw_p=["bw"], roof_launch_p=["l"], roof_stage=[0], roof_backend=[0])
    space = ParameterSpace()
    space.add([Parameter("r", 100.0, "GFLOP/s", "assumed: a test", 10.0, 1000.0),
               Parameter("bw", 1e6, "GB/s", "a test"), Parameter("l", 0.0, "us", "a test")])
    draws = space.sample(400, 0)
    out = needs(cm, draws, 5.0, [], [], "HTP")
    assert not out["met"] and out["p_now"] == pytest.approx(0.35, abs=0.06)
    one = out["one_parameter"][0]
    assert one["parameter"] == "r" and one["op"] == ">=" and one["value"] == pytest.approx(200.0, rel=0.01)
    assert "r >= " in out["text"]
    assert out["best_case_ms"] == pytest.approx(1.0)  # r at its high bound, 1000 GFLOP/s
    out = needs(cm, draws, 0.5, [], [], "HTP")
    assert out["no_single_parameter"] and out["not_alone"] == ["r"]
    assert "beyond every range" in out["text"]
    assert needs(cm, draws, 20.0, [], [], "HTP")["met"]


def test_spinning_blas_workers_slow_the_next_cpu_split(model):
    """blas.toml's spin_ms / contention: every CPU split right after a BLAS split costs contention x min(its
    scaled CPU time, spin_ms) more, priced per draw; a profile that states one without the other is refused."""
    from kzlab.analysis.placement.capabilities import load
    from kzlab.analysis.predict.parameters import backend_perf
    from kzlab.analysis.profile_cache import cached_cpu_profile

    low = kzlab.Lowering(mode="portable")
    prof, _ = cached_cpu_profile(model, 8, low, threads=1)
    sets = [("BLAS", "blas", "CPU"), ("CPU", "cpu", "CPU")]
    pl = kzlab.simulate(model, frames=8, lowering=low, backends=sets, weights_on="BLAS",
                        predict={"cpu_profile": prof, "draws": 200})
    p = pl.predicted
    after = [i + 1 for i, s in enumerate(pl.splits[:-1]) if s.backend == "BLAS" and pl.splits[i + 1].backend == "CPU"]
    assert after and len(p.costs.contention_terms) <= len(after)
    slowed = [s for s in p.splits if s.get("contention_ms")]
    assert slowed and all(s["index"] in after for s in slowed)
    assert {"BLAS.spin_ms", "BLAS.contention"} <= {q.name for q in p.parameters}
    table = dict(load("blas").perf)
    quiet = kzlab.simulate(model, frames=8, lowering=low, backends=sets, weights_on="BLAS",
                           predict={"cpu_profile": prof, "draws": 200,
                                    "perf": {"BLAS": {**table, "contention": 1e-6, "spin_ms": 1e-6}}})
    extra = sum(s["contention_ms"] for s in slowed)
    assert p.nominal_ms - quiet.predicted.nominal_ms == pytest.approx(extra, rel=1e-3, abs=1e-6)
    with pytest.raises(InvalidOptionError, match="spin_ms and contention go together"):
        backend_perf("BLAS", {k: v for k, v in table.items() if k != "contention"}, "test")


def test_a_whatif_calibrated_against_public_figures_says_so(full_model, monkeypatch):
    """`kzlab.whatif` on totals made with an HMX rate of 60 GFLOP/s (twenty times below the public figures): the
    calibration flags the rate, with the configuration's own decode in the command, and the answer's first note
    says that every probability rests on it. The CPU profiles are taken as a scalar-libm build's (no CPU.libm_skew
    to confound the HTP with; that parameter is tested on its own in test_whatif)."""
    from kzlab.analysis.predict import timing

    monkeypatch.setattr(timing, "profile_libm", lambda prof: "scalar")
    low = kzlab.Lowering(mode="portable", conv="im2col-f16", conv_src1="data")
    kw = {"frames": 6, "lowering": low, "cpu_baseline_ms": 900.0, "draws": 300, "seed": 0, "threads": 1}
    prior = kzlab.whatif(full_model, ["v=hexagon-v0.15.3"], **kw)
    space = ParameterSpace.shared_by({k: p.predicted for k, p in prior.placements.items()})
    truth = truth_draws(space.sample(1, 0), {"HTP.gflops.MUL_MAT.F16.hmx": 60.0})
    measured = {k: float(p.predicted.costs.evaluate(truth, parts=False)["total"][0])
                for k, p in prior.placements.items() if not prior.decision.configs[k].get("variant_of")}
    r = kzlab.whatif(full_model, ["v=hexagon-v0.15.3"], measured=measured, **kw)
    d = r.to_dict()
    flags = [f for f in d["calibration"]["flags"] if f["kind"] == "contradicts_public"]
    assert [f["parameter"] for f in flags] == ["HTP.gflops.MUL_MAT.F16.hmx"], r.summary()
    assert "configuration 'v'" in flags[0]["command"] and "GGML_HEXAGON_PROFILE=1" in flags[0]["command"]
    assert d["notes"][0].startswith("the calibration contradicts public measurements (HTP.gflops.MUL_MAT.F16.hmx)")
