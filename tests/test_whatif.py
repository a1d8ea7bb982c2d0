"""Predictions as distributions, decisions as probabilities, calibration as inference (`kzlab.whatif`).

The tiny decoder stands for the full one: the properties checked here (paired draws, the JSON contract, that a
calibration from totals made by known parameter values recovers those values where it says it identified them,
flags for values outside their plausible ranges, the profile cache) do not depend on the decoder's size.
"""

from __future__ import annotations

import json

import pytest
from conftest import TINY, ask_whatif, truth_draws

import kzlab
from kzlab.analysis.predict.inference import infer
from kzlab.analysis.predict.parameters import Parameter
from kzlab.errors import InvalidInputError, InvalidOptionError

F32 = TINY / "qwentts-tokenizer-f32.gguf"
FRAMES = 4
CONFIGS = ["v0.15.2=hexagon-v0.15.2", "v0.15.3=hexagon-v0.15.3", "chunk=hexagon-v0.15.2,mm_chunk=1024"]


pytestmark = pytest.mark.usefixtures("isolated_cache")


@pytest.fixture(scope="module")
def model():
    return kzlab.load_model(F32)


def ask(model, **kw):
    return ask_whatif(model, CONFIGS, **kw)


def test_contract_and_paired_draws(model):
    r = ask(model, target_ms=150.0)
    d = json.loads(json.dumps(r.to_dict()))
    assert set(d["configs"]) == {"cpu", "v0.15.2", "v0.15.3", "chunk"}
    for c in d["configs"].values():
        rg = c["range"]
        assert rg["min"] <= rg["p10"] <= rg["p50"] <= rg["p90"] <= rg["max"] and rg["draws"] == 400
        assert c["splits"] >= 1 and c["memory"]
    assert len(d["pairs"]) == 6
    for p in d["pairs"]:
        assert 0.0 <= p["p_a_faster"] <= 1.0 and p["ratio"]["p10"] <= p["ratio"]["p50"] <= p["ratio"]["p90"]
    assert set(d["target"]) == set(d["configs"]) and all(0.0 <= v <= 1.0 for v in d["target"].values())
    assert d["sensitivity"] and all(0.0 <= s["share"] <= 1.0 for s in d["sensitivity"])
    assert d["decision"]["a"] != "cpu" and d["decision"]["b"] != "cpu"  # a decision between changes
    # every configuration puts the whole graph under the scheduler: each pair compares one scope
    assert {p["scope"]["kind"] for p in d["pairs"]} == {"same", "cpu_only"}
    # paired: P(A faster) is counted draw by draw on the same draws as the placements' own ranges
    a, b = r.placements["v0.15.2"].predicted, r.placements["v0.15.3"].predicted
    assert r.decision.configs["v0.15.2"]["range"] == a.range and b.range["draws"] == 400
    pair = next(p for p in d["pairs"] if {p["a"], p["b"]} == {"v0.15.2", "v0.15.3"})
    assert 0.0 < pair["ratio"]["p50"]
    # deterministic for a seed, different for another
    again = ask(model, target_ms=150.0).to_dict()
    assert again["pairs"] == d["pairs"] and again["configs"] == d["configs"]
    other = ask(model, target_ms=150.0, seed=2).to_dict()
    assert other["configs"]["v0.15.2"]["range"] != d["configs"]["v0.15.2"]["range"]


def test_next_measurements_name_device_commands(model):
    r = ask(model)
    nm = r.decision.next_measurements
    assert nm, r.summary()
    commands = " ".join(m["command"] for m in nm)
    assert any(k in commands for k in ("test-backend-ops", "GGML_HEXAGON_PROFILE", "GGML_SCHED_DEBUG",
                                       "GGML_HEXAGON_OPFILTER"))
    for m in nm:
        assert m["spread_after"] <= m["spread_before"] + 1e-9 and 0.0 <= m["p_settled_after"] <= 1.0


def test_profiles_are_cached_and_the_cache_can_be_refused(model):
    first = ask(model)
    again = ask(model)
    assert all(v["cached"] for v in again.profiles.values())
    assert again.to_dict()["configs"] == first.to_dict()["configs"]
    fresh = ask(model, cache=False)
    assert not any(v["cached"] for v in fresh.profiles.values())
    assert "cached" in again.summary()


def test_calibration_recovers_synthetic_truth(model):
    """Totals made by chosen parameter values (four configurations at two frame counts: the splits stay, the work
    grows, so fixed costs and rates can be told apart) are calibrated on; where the result says a parameter was
    identified, the true value lies within its reported range; the measured totals are reproduced."""
    from helpers import cpu_perf_at_this_machines_libm

    from kzlab.analysis.predict.draws import ParameterSpace
    from kzlab.analysis.profile_cache import cached_cpu_profile

    low = kzlab.Lowering(mode="portable")
    models, space = {}, ParameterSpace()
    # the CPU's libm ops at this machine's speed: the truth here is about the HTP (a libmvec build of ggml would
    # otherwise draw them from CPU.libm_skew, the device's scalar libm, and that parameter is tested on its own)
    cpu_perf = cpu_perf_at_this_machines_libm()
    for frames in (4, 24):
        for name, profile, opts in (("cpu", "cpu", {}), ("v0.15.2", "hexagon-v0.15.2", {}),
                                    ("chunk", "hexagon-v0.15.2", {"mm_chunk": 1024})):
            lw = low.replace(**opts)
            prof, _ = cached_cpu_profile(model, frames, lw, threads=1)
            won = "cpu" if name == "cpu" else "htp"
            pl = kzlab.simulate(model, profile, frames=frames, lowering=lw, weights_on=won,
                                predict={"cpu_profile": prof, "cpu_scale": 1.0, "draws": 10, "perf": {"CPU": cpu_perf}})
            models[f"{name}@{frames}"] = pl.predicted.costs
            used = pl.predicted.costs.parameter_names()
            space.add([q for q in pl.predicted.parameters if q.name in used])
    truth_values = {"HTP.sync_us": 900.0, "HTP.bandwidth_gbs": 14.0, "HTP.gflops.MUL_MAT.F32.hvx": 2.5}
    truth = truth_draws(space.sample(1, 0), truth_values)
    measured = {k: float(m.evaluate(truth, parts=False)["total"][0]) for k, m in models.items()}
    post = infer(models, space, measured, n=1000, seed=4, noise=0.02)
    assert {"HTP.sync_us", "HTP.gflops.MUL_MAT.F32.hvx"} <= set(post.identified), post.summary()
    for p in post.parameters:
        true = truth_values.get(p["parameter"], space.params[p["parameter"]].value)
        if p["verdict"] == "identified":
            assert p["range_low"] <= true <= p["range_high"], (p, true)
    for k, rep in post.reproduced.items():
        assert rep["p10"] <= measured[k] * 1.04 and rep["p90"] >= measured[k] * 0.96, (k, rep)
    assert not [f for f in post.flags if f["parameter"] is None]
    # one frame count cannot tell the per-split cost from the rates: the answer says so instead of guessing
    one = infer({k: v for k, v in models.items() if k.endswith("@4")}, space,
                {k: v for k, v in measured.items() if k.endswith("@4")}, n=1000, seed=4, noise=0.02)
    assert "HTP.sync_us" in one.prior_only


def test_implausible_totals_are_flagged_with_the_parameter_and_the_factor(model):
    r = ask(model, measured={"cpu": 200.0, "v0.15.2": 100_000.0})
    cal = r.to_dict()["calibration"]
    assert cal["flags"]
    assert any(f["parameter"] is None and "outside" in f["message"] for f in cal["flags"])
    named = [f for f in cal["flags"] if f["parameter"]]
    assert named and all(f["factor"] >= 1.0 and "would stand for" in f["message"] for f in named)


def test_point_calibration_flags_a_value_outside_its_range():
    from kzlab.analysis.predict.calibrate import implausible

    prior = Parameter("HTP.sync_us", 300.0, "us", "assumed: a test", 50.0, 2000.0)
    assert implausible(Parameter("HTP.sync_us", 500.0, "us", "calibrated"), prior) == ""
    msg = implausible(Parameter("HTP.sync_us", 20400.0, "us", "calibrated"), prior)
    assert "HTP.sync_us" in msg and "10.2x above" in msg and "stand for" in msg


def test_bad_questions_are_refused(model):
    with pytest.raises(InvalidOptionError, match="NAME=PROFILE"):
        kzlab.whatif(model, ["hexagon-v0.15.2"], frames=FRAMES)
    with pytest.raises(InvalidOptionError, match="distinct"):
        kzlab.whatif(model, ["a=hexagon-v0.15.2", "a=hexagon-v0.15.3"], frames=FRAMES)
    with pytest.raises(InvalidOptionError, match="draws"):
        kzlab.whatif(model, CONFIGS, frames=FRAMES, draws=0)
    with pytest.raises(InvalidInputError, match="not a configuration"):
        kzlab.whatif(model, CONFIGS, frames=FRAMES, measured={"nothing": 3.0})
    with pytest.raises(InvalidOptionError, match="capability profile|no such"):
        kzlab.whatif(model, ["a=hexagon-v9"], frames=FRAMES)


def test_cli_writes_the_contract(tmp_path, capsys):
    from kzlab.cli import main

    out = tmp_path / "w.json"
    rc = main(["whatif", str(F32), "--frames", str(FRAMES), "--cpu-baseline-ms", "200", "--threads", "1",
               "--config", CONFIGS[0], "--config", CONFIGS[1], "--config", CONFIGS[2], "--target-ms", "150",
               "--measured", "cpu=200", "hexagon-v0.15.2=230", "--draws", "300", "--json", str(out), "-q"])
    assert rc == 0
    d = json.loads(out.read_text())
    assert {"configs", "pairs", "target", "sensitivity", "next_measurements", "calibration"} <= set(d)
    assert {"identified", "prior_only", "flags"} <= set(d["calibration"])
    assert all({"parameter", "command", "spread_after"} <= set(m) for m in d["next_measurements"])
    assert "P =" in capsys.readouterr().out
    assert main(["whatif", str(F32), "--config", "x=hexagon-v0.15.2", "--measured", "cpu", "-q"]) == 2


def test_a_cpu_profile_with_vectorised_libm_prices_the_devices_scalar_libm(model):
    """A profile from a ggml whose libm calls are vectorised (glibc libmvec) against a device whose CPU calls a
    scalar libm (the Hexagon profiles' `host_libm`): the CPU's libm ops (SIN here) take CPU.libm_skew, the
    CPU-only baseline stays reproduced, and a profile from a scalar build is taken as it is."""
    import copy

    from kzlab.analysis.predict.parameters import LIBM_OPS

    low = kzlab.Lowering.preset("device")  # the graph the simulator places
    # every node timed alone: a libm op's time then measures this machine's libm
    prof = kzlab.profile(model, frames=FRAMES, backend="cpu", sched=False, lowering=low, threads=1, repeat=1,
                         warmup=0, peak=False, granularity="node").to_dict()
    assert any(n["op"] == "SIN" and n["timing"] == "measured" for n in prof["nodes"])

    def run(libm: str, profile: str = "hexagon-v0.15.3", base=prof):
        p = copy.deepcopy(base)
        p["config"]["versions"] = {**p["config"].get("versions", {}), "ggml_cpu_libm": libm}
        won = "cpu" if profile == "cpu" else "htp"
        return kzlab.simulate(model, profile, frames=FRAMES, lowering=low, weights_on=won,
                              predict={"cpu_profile": p, "cpu_baseline_ms": 1000.0, "draws": 50}).predicted

    scalar, vector, cpu_only = run("scalar"), run("libmvec"), run("libmvec", "cpu")
    assert "CPU.libm_skew" not in {q.name for q in scalar.parameters}
    assert "CPU.libm_skew" not in {q.name for q in cpu_only.parameters}  # the CPU alone: no device to differ from
    skew = next(q for q in vector.parameters if q.name == "CPU.libm_skew")
    assert skew.low < skew.value < skew.high and skew.low > 1
    assert any("CPU.libm_skew" in n and "SIN" in n for n in vector.notes)

    def cpu_ms(pred, libm_ops: bool) -> float:
        return sum(r["ms"] for r in pred.nodes if r["backend"].lower() == "cpu" and (r["op"] in LIBM_OPS) == libm_ops)

    # the same CPU nodes, their libm ops skew times heavier against the rest than in the scalar build's pricing
    ratio_scalar = cpu_ms(scalar, True) / cpu_ms(scalar, False)
    ratio_vector = cpu_ms(vector, True) / cpu_ms(vector, False)
    assert ratio_vector == pytest.approx(skew.value * ratio_scalar, rel=1e-9)
    # the whole CPU profile, priced with the skews, still comes to the CPU-only baseline
    t = vector.costs.cpu
    s, k, j = t.factors({q.name: q.value for q in vector.parameters}.__getitem__, 1.0)
    assert t.profile_libm_ms > 0 and j == skew.value
    whole = s * (k * t.profile_mm_ms + j * t.profile_libm_ms + t.profile_rest_ms - t.profile_libm_ms)
    assert whole == pytest.approx(1000.0, rel=1e-9)
    assert cpu_only.nominal_ms == pytest.approx(1000.0, abs=0.1)  # plus the one CPU split's start (sync_us)
    # a profile whose libm ops share their stretches (as granularity="auto" may time them, depending on the
    # machine): their times are a cost model's shares, taken as they are
    shared = copy.deepcopy(prof)
    for n in shared["nodes"]:
        if n["op"] in LIBM_OPS:
            n["timing"] = "apportioned"
    guessed = run("libmvec", base=shared)
    assert not guessed.costs.cpu.libm and "CPU.libm_skew" not in {q.name for q in guessed.parameters}
    assert any("apportioned" in n and "SIN" in n for n in guessed.notes)
    ratio = {k: cpu_ms(p, True) / cpu_ms(p, False) for k, p in (("scalar", run("scalar", base=shared)),
                                                                   ("libmvec", guessed))}
    assert ratio["libmvec"] == pytest.approx(ratio["scalar"], rel=1e-9)


def _posterior(parameters, flags):
    """A Posterior with given parameter verdicts and flags (what `infer` would have found)."""
    import numpy as np

    from kzlab.analysis.predict.draws import Draws
    from kzlab.analysis.predict.inference import Posterior

    rows = [{"parameter": n, "verdict": v, "low": 1.0, "high": 100.0, "p10": 2.0, "p50": 3.0, "p90": 4.0,
             "shrink": 0.1 if v != "prior" else 1.0} for n, v in parameters]
    draws = Draws([n for n, _ in parameters], np.ones((1, len(parameters))), 0, {})
    return Posterior(draws, {"cpu": 1.0}, 0.03, 500.0, {}, rows, flags)


def test_a_flagged_parameter_is_neither_identified_nor_left_at_its_prior():
    """A parameter the calibration flagged (it contradicts public measurements, or the totals push it to a bound)
    was moved by the totals to where it cannot be taken at face value: it is listed apart, never as left at its
    prior."""
    hmx, copy = "HTP.gflops.MUL_MAT.F16.hmx", "HTP.bandwidth_gbs.copy"
    post = _posterior([(hmx, "contradicts public"), ("HTP.sync_us", "prior"), (copy, "narrowed"),
                       ("HTP.launch_us", "identified")],
                      [{"parameter": hmx, "kind": "contradicts_public", "message": "m"},
                       {"parameter": copy, "kind": "at_bound", "message": "m"},
                       {"parameter": None, "kind": "few_draws", "message": "m"}])
    assert post.prior_only == ["HTP.sync_us"]
    assert post.identified == ["HTP.launch_us"] and post.contradicts_public == [hmx]
    assert post.flagged == {hmx: ["contradicts_public"], copy: ["at_bound"]}
    d = post.to_dict()
    assert hmx not in d["prior_only"] and copy not in d["prior_only"] and d["contradicts_public"] == [hmx]
    status = {p["parameter"]: p["status"] for p in d["parameters"]}
    assert status == {hmx: "contradicts public", "HTP.sync_us": "prior", copy: "at bound",
                      "HTP.launch_us": "identified"}
    assert "flagged (neither identified nor at their prior)" in post.summary()


def _two_changes():
    """Paired totals of the CPU-only decode and two changes: x is always faster than y (P = 1), its spread all
    parameter A's; B explains next to nothing."""
    import numpy as np

    from kzlab.analysis.predict.draws import ParameterSpace

    space = ParameterSpace()
    space.add([Parameter("A", 1.0, "x", "assumed: a test", 0.5, 2.0), Parameter("B", 1.0, "x", "assumed", 0.5, 2.0)])
    draws = space.sample(2000, 0)
    a, b = draws.column("A"), draws.column("B")
    totals = {"cpu": np.full(2000, 20.0), "x": 5.0 * a + 0.01 * b, "y": np.full(2000, 12.0)}
    extra = {"cpu": {"profile": "cpu", "sched_stages": None},
             "x": {"profile": "hexagon-v0.15.3", "sched_stages": ["decoder"]},
             "y": {"profile": "hexagon-v0.21.0", "sched_stages": None}}
    return totals, draws, extra


def test_a_decision_resting_on_a_flagged_parameter_is_not_settled():
    from kzlab.analysis.predict.decide import decide

    totals, draws, extra = _two_changes()
    plain = decide(totals, draws, extra=extra, baseline="cpu").decision
    assert (plain["a"], plain["b"]) == ("x", "y") and plain["p_a_faster"] == 1.0 and plain["settled"]
    assert plain["unsettled_by"] == []
    flagged = decide(totals, draws, extra=extra, baseline="cpu",
                     flags=[{"parameter": "A", "kind": "contradicts_public"}])
    dd = flagged.decision
    assert dd["p_a_faster"] == 1.0 and not dd["settled"] and dd["settled_by_p"]
    assert [u["parameter"] for u in dd["unsettled_by"]] == ["A"] and dd["unsettled_by"][0]["kinds"] == [
        "contradicts_public"]
    assert any(n.startswith("not settled whatever P says") and "A (" in n for n in flagged.notes)
    # a flagged parameter the decision does not rest on (share under 0.05, not the top) leaves it settled
    assert decide(totals, draws, extra=extra, baseline="cpu", flags={"B": "at_bound"}).decision["settled"]
    # applied after the fact (a calibration known once the decision is made), the same
    late = decide(totals, draws, extra=extra, baseline="cpu")
    late.settle_against([{"parameter": "A", "kind": "at_bound"}])
    assert not late.decision["settled"] and late.decision["unsettled_by"][0]["kinds"] == ["at_bound"]


def test_pairs_say_whether_they_compare_one_scope():
    from kzlab.analysis.predict.decide import ALL_STAGES, decide
    from kzlab.report.whatif_section import decision_sentence, whatif_html

    totals, draws, extra = _two_changes()
    dec = decide(totals, draws, extra=extra, baseline="cpu")
    scope = {(p["a"], p["b"]): p["scope"] for p in dec.pairs}
    assert scope[("x", "y")] == {"kind": "different", "a_stages": ["decoder"], "b_stages": ALL_STAGES}
    assert scope[("cpu", "x")]["kind"] == "cpu_only" and dec.decision["scope"]["kind"] == "different"
    assert any("different stages under the device's scheduler" in n and "x vs y" in n for n in dec.notes)
    same = {k: {**v, "sched_stages": ["decoder"]} if k != "cpu" else v for k, v in extra.items()}
    one = decide(totals, draws, extra=same, baseline="cpu")
    assert {p["scope"]["kind"] for p in one.pairs} == {"same", "cpu_only"}
    assert not any("different stages" in n for n in one.notes)
    d = dec.to_dict()
    assert "different stages under the scheduler" in decision_sentence(d)
    assert "DIFFERENT: decoder / all" in whatif_html(d)
