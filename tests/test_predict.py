"""The time and memory model of a placement: what it rests on, that it adds up, and that the memory it reports
is what ggml's real scheduler reserves (on backends this machine has)."""

from __future__ import annotations

import json

import pytest
from conftest import TINY

import kzlab
from kzlab.analysis.predict.parameters import backend_perf
from kzlab.analysis.predict.timing import predict
from kzlab.errors import InvalidInputError, InvalidOptionError

F32 = TINY / "qwentts-tokenizer-f32.gguf"
PORTABLE = kzlab.Lowering.preset("device")  # the graph the simulator places, on the CPU too
FRAMES = 4


@pytest.fixture(scope="module")
def model():
    return kzlab.load_model(F32)


@pytest.fixture(scope="module")
def cpu_profile(model):
    """A CPU-only profile of the portable graph (what a prediction's CPU nodes stand on)."""
    return kzlab.profile(model, frames=FRAMES, backend="cpu", lowering=PORTABLE, repeat=2, warmup=1, peak=False,
                         progress=False, threads=1)


def test_prediction_adds_up_and_names_its_sources(model, cpu_profile):
    pl = kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE, predict={"cpu_profile": cpu_profile})
    p = pl.predicted
    node_ms = sum(r["ms"] for r in p.nodes)
    split_ms = sum(s["copy_ms"] + s["sync_ms"] + s["cache_ms"] for s in p.splits)
    assert p.nominal_ms == pytest.approx(node_ms + split_ms)  # the rows, at the stated values, add up
    r = p.range
    assert r["min"] <= r["p10"] <= r["p50"] <= r["p90"] <= r["max"] and r["draws"] == 500
    assert p.total_ms == r["p50"] and r["min"] < r["max"]  # total_ms is the median of the draws
    assert set(p.backend_ranges) == set(p.by_backend_ms) and set(p.stage_ranges) == set(p.by_stage_ms)
    assert {r["how"] for r in p.nodes if r["backend"] == "CPU"} == {"cpu profile"}
    assert {r["how"] for r in p.nodes if r["backend"] == "HTP" and r["how"] != "view"} == {"roofline"}
    names = {q.name for q in p.parameters}
    assert {"cpu.profile_wall_ms", "cpu.profile_normalisation", "HTP.sync_us"} <= names
    assert "HTP.sync_us" in p.assumed and "cpu.profile_wall_ms" not in p.assumed
    assert "assumed value" in p.summary()
    d = pl.to_dict()
    assert set(d["predicted"]) >= {"total_ms", "by_backend_ms", "by_stage_ms", "copy_ms", "sync_ms", "parameters"}
    assert all({"name", "value", "unit", "source"} <= set(q) <= {"name", "value", "unit", "source", "low", "high",
                                                                "public", "public_source"}
               for q in d["predicted"]["parameters"])
    ranged = {q["name"]: q for q in d["predicted"]["parameters"] if "low" in q}
    assert "HTP.sync_us" in ranged and all(q["low"] <= q["value"] <= q["high"] for q in ranged.values())
    assert d["predicted"]["range"] == p.range and d["predicted"]["total_is"] == "p50 of the draws"
    for m in d["memory"].values():
        assert set(m) >= {"weights_bytes", "compute_bytes", "total_bytes", "budget_bytes", "fits"}
    json.dumps(d)


def test_cpu_nodes_reproduce_the_cpu_profile(model, cpu_profile):
    """On the CPU alone, the prediction is the profile's plain wall time (scaled when asked)."""
    pl = kzlab.simulate(model, "cpu", frames=FRAMES, lowering=PORTABLE, weights_on="cpu",
                        predict={"cpu_profile": cpu_profile})
    cpu_sync = sum(s["sync_ms"] for s in pl.predicted.splits)
    assert pl.predicted.nominal_ms - cpu_sync == pytest.approx(cpu_profile.wall_ms, rel=1e-9)
    pl = kzlab.simulate(model, "cpu", frames=FRAMES, lowering=PORTABLE, weights_on="cpu",
                        predict={"cpu_profile": cpu_profile, "cpu_baseline_ms": 3340.0, "draws": 2000})
    assert pl.predicted.nominal_ms - cpu_sync == pytest.approx(3340.0, rel=1e-9)
    # drawn: the baseline's own +-3 % (and the splits' cost) is all the spread a CPU-only prediction has
    r = pl.predicted.range
    assert 3340.0 * 0.97 <= r["min"] and r["max"] <= 3340.0 * 1.03 + 10 * cpu_sync
    assert r["p10"] < 3340.0 + cpu_sync < r["p90"]


def test_a_profile_of_another_graph_is_refused(model, cpu_profile, tmp_path):
    with pytest.raises(InvalidInputError, match="frames"):
        kzlab.simulate(model, frames=FRAMES + 1, lowering=PORTABLE, predict={"cpu_profile": cpu_profile})
    with pytest.raises(InvalidInputError, match="another lowering"):
        kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE.replace(conv="ktap"),
                       predict={"cpu_profile": cpu_profile})
    bad = tmp_path / "p.json"
    bad.write_text('{"not": "a profile"}')
    with pytest.raises(InvalidInputError, match="not a kzlab profile"):
        kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE, predict={"cpu_profile": bad})
    with pytest.raises(InvalidInputError, match="no such profile"):
        kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE, predict={"cpu_profile": tmp_path / "none.json"})
    with pytest.raises(InvalidOptionError, match="unknown option"):
        kzlab.simulate(model, frames=FRAMES, predict={"cpu_profil": 1})


def test_roofline_of_a_device_node():
    perf = backend_perf("HTP", {"gflops": {"default": 1.0, "MUL_MAT": 100.0}, "bandwidth_gbs": 1.0,
                                "launch_us": 10.0, "sync_us": 50.0, "copy_gbs": 2.0,
                                "source": "calibrated from a test"}, "test")
    node = {"name": "x:MUL_MAT", "op": "MUL_MAT", "backend": "HTP", "stage": "s", "flops": 2e9, "bytes": 1e6,
            "src_types": ["F16", "F32"]}
    add = {"name": "x:ADD", "op": "ADD", "backend": "HTP", "stage": "s", "flops": 1e6, "bytes": 4e6,
           "src_types": ["F32"]}
    split = {"backend": "HTP", "input_bytes": 4_000_000, "stage": "s"}
    p = predict([node, add], [split], {"frames": 1}, {"htp": perf})
    rows = {r["name"]: r["ms"] for r in p.nodes}
    assert rows["x:MUL_MAT"] == pytest.approx(2e9 / 100e9 * 1e3 + 0.01)  # compute-bound
    assert rows["x:ADD"] == pytest.approx(4e6 / 1e9 * 1e3 + 0.01)  # memory-bound
    assert p.copy_ms == pytest.approx(4e6 / 2e9 * 1e3) and p.sync_ms == pytest.approx(0.05)
    assert not [q for q in p.parameters if q.name.startswith("HTP.") and q.assumed]
    # nothing uncertain: every draw is the point, and the vectorised terms price it as the rows do
    assert p.range["min"] == pytest.approx(p.range["max"]) == pytest.approx(p.nominal_ms)
    assert p.nominal_ms == pytest.approx(sum(rows.values()) + p.copy_ms + p.sync_ms)
    # a ranged rate: the node's time spans the roofline at both ends of the range, and no further
    perf = backend_perf("HTP", {"gflops": {"default": 1.0, "MUL_MAT": {"value": 100.0, "low": 10.0, "high": 200.0}},
                                "bandwidth_gbs": 1.0, "launch_us": 10.0, "sync_us": 50.0, "copy_gbs": 2.0,
                                "source": "a test"}, "test")
    p = predict([node], [], {"frames": 1}, {"htp": perf}, draws=4000, seed=3)
    assert 2e9 / 200e9 * 1e3 + 0.01 <= p.range["min"] < p.range["max"] <= 2e9 / 10e9 * 1e3 + 0.01 + 1e-12
    assert p.range["p50"] == pytest.approx(2e9 / (10e9 * 20 ** 0.5) * 1e3 + 0.01, rel=0.05)  # log-uniform median
    again = predict([node], [], {"frames": 1}, {"htp": perf}, draws=4000, seed=3)
    assert again.range == p.range  # seeded
    with pytest.raises(InvalidOptionError, match="launch_us"):
        backend_perf("HTP", {"launch_us": -1}, "test")
    with pytest.raises(InvalidOptionError, match="unknown key"):
        backend_perf("HTP", {"flops": 1}, "test")


RPC_SET = [("RPC", "rpc", "RPC"), ("CPU", "cpu", "CPU")]


def test_a_cpu_server_behind_rpc_is_priced_from_the_cpu_profile(model, cpu_profile):
    """An RPC server computes with ggml-cpu's kernels: its nodes take the CPU profile's time for the same node x
    RPC.cpu_relative, which the totals are linear in; without a profile, or with one of another backend, the
    roofline (and a note saying why)."""
    from kzlab.analysis.predict.calibrate import calibrate

    free = {"sync_us": 0.0, "copy_gbs": 1e9, "source": "a test"}  # no split costs: only the nodes remain

    def run(profile, **perf):
        return kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE, backends=RPC_SET, weights_on="RPC",
                              predict={"cpu_profile": profile, "perf": {"RPC": {**free, **perf}}}).predicted

    one, two = run(cpu_profile, cpu_relative=1.0), run(cpu_profile, cpu_relative=2.0)
    rel = [r for r in one.nodes if r["backend"] == "RPC" and r["how"] != "view"]
    assert rel and {r["how"] for r in rel} == {"cpu profile x RPC.cpu_relative"}
    assert one.costs.to_dict()["roofline_nodes"] == 0
    # every node at its profiled time: the profile's wall; at 2, the server's nodes count twice
    assert one.nominal_ms == pytest.approx(cpu_profile.wall_ms, rel=1e-6)
    server = sum(r["ms"] for r in rel)
    assert two.nominal_ms == pytest.approx(cpu_profile.wall_ms + server, rel=1e-6)
    # drawn: the profile's own spread scales the server's nodes as it scales the CPU's
    sp = next(q for q in one.parameters if q.name == "cpu.profile_spread")
    assert sp.low * one.nominal_ms - 1e-9 <= one.range["min"] <= one.range["max"] <= sp.high * one.nominal_ms + 1e-9
    drawn = run(cpu_profile, cpu_relative={"value": 1.0, "low": 0.5, "high": 2.0})
    cpu_ms = one.nominal_ms - server
    assert sp.low * (cpu_ms + 0.5 * server) - 1e-9 <= drawn.range["min"] < drawn.range["max"] \
        <= sp.high * (cpu_ms + 2 * server) + 1e-9
    assert drawn.range["max"] - drawn.range["min"] > one.range["max"] - one.range["min"]
    assert "RPC.cpu_relative" in {q.name for q in drawn.parameters}
    # no profile: the roofline; a profile of the CPU with BLAS: its products are not ggml-cpu's
    plain = kzlab.simulate(model, frames=FRAMES, lowering=PORTABLE, backends=RPC_SET, weights_on="RPC",
                           predict=True).predicted
    assert "roofline" in {r["how"] for r in plain.nodes}
    blas = cpu_profile.to_dict()
    blas["config"] = {**blas["config"], "backend": ["blas", "cpu"], "backend_label": "BLAS+CPU"}
    other = run(blas, cpu_relative=1.0)
    assert "roofline" in {r["how"] for r in other.nodes} and any("not on the plain CPU" in n for n in other.notes)
    # a point fit of the factor reproduces a measured total
    cal = calibrate(model, {"cpu": 40.0, "rpc": 55.0}, cpu_profile, FRAMES, PORTABLE, fit="cpu_relative",
                    weights_on="rpc")
    assert [p.name for p in cal.fitted] == ["RPC.cpu_relative"]
    assert all(abs(e) < 1e-6 for e in cal.errors().values()), cal.errors()


@pytest.mark.parametrize("pair", ["blas", "rpc"])
def test_memory_is_what_the_real_scheduler_reserves(model, pair):
    """The compute buffers measured for a simulated placement equal the real scheduler's (same graph, same
    assignment): exactly where the two backends share a buffer type (BLAS + CPU); within the split input copies,
    counted at full size, where they do not (RPC + CPU)."""
    from ggml import ggml as g

    from kzlab.runtime.rpc import rpc_server
    from kzlab.runtime.session import Session

    frames = 40
    with rpc_server(threads=1) as srv:
        spec, sim, won = {
            "blas": (["blas", "cpu"], [("BLAS", "blas", "CPU"), ("CPU", "cpu", "CPU")], "BLAS"),
            "rpc": ([srv.address, "cpu"], [("RPC", "rpc", "RPC"), ("CPU", "cpu", "CPU")], "RPC"),
        }[pair]
        with Session(model, PORTABLE, backend=spec, sched=True, threads=1) as s:
            bg = s.graph(frames)
            s.backends.prepare(bg)
            real = [int(g.ggml_backend_sched_get_buffer_size(s.backends.sched, b.handle)) for b in s.backends.backends]
    pl = kzlab.simulate(model, frames=frames, lowering=PORTABLE, backends=sim, weights_on=won, predict=True)
    est = [pl.memory[n].compute_bytes + pl.memory[n].copies_bytes for n in ("BLAS" if pair == "blas" else "RPC", "CPU")]
    if pair == "blas":
        assert est == [real[0], 0] and real[1] == 0  # one shared buffer, counted once
        assert pl.memory["CPU"].shared_with == ["BLAS"]
    else:
        assert est[0] == pytest.approx(real[0], rel=0.01)
        assert abs(sum(est) - sum(real)) <= 0.01 * sum(real)
    assert pl.memory[pl.config["weights_on"]].weights_bytes > 0


def test_calibrate_reproduces_the_device_totals(model, cpu_profile, tmp_path):
    """Fed the user's two totals, calibration writes a profile that reproduces both (within 5 %) and says what
    it fitted and what stayed assumed; the profile loads and predicts the same."""
    from kzlab.analysis.placement.capabilities import load
    from kzlab.analysis.predict.calibrate import calibrate

    cal = calibrate(model, {"cpu": 3340.0, "hexagon-v0.15.2": 3950.0}, cpu_profile, FRAMES, PORTABLE)
    assert all(abs(e) <= 0.05 for e in cal.errors().values()), cal.errors()
    assert [p.name for p in cal.fitted] == ["HTP.sync_us"] and cal.fitted[0].source.startswith("calibrated from")
    assert cal.assumed and all(p.assumed for p in cal.assumed)
    path = tmp_path / "hexagon-calibrated.toml"
    path.write_text(cal.profile_text)
    caps = load(path)
    assert caps.name == "hexagon-v0.15.2-calibrated" and caps.calibration["cpu_scale"] == cal.cpu_scale.value
    pl = kzlab.simulate(model, path, frames=FRAMES, lowering=PORTABLE,
                        predict={"cpu_profile": cpu_profile, "cpu_scale": cal.cpu_scale.value})
    assert pl.predicted.total_ms == pytest.approx(3950.0, rel=0.05)
    sync = next(p for p in pl.predicted.parameters if p.name == "HTP.sync_us")
    assert sync.source.startswith("calibrated from") and not sync.assumed
    with pytest.raises(InvalidInputError, match="CPU-only"):
        calibrate(model, {"hexagon-v0.15.2": 3950.0}, cpu_profile, FRAMES, PORTABLE)


def test_bad_profile_toml_is_refused(tmp_path):
    """A profile whose [perf] values are bad is refused naming the value: the HTP profiles' values live in their
    shared base (devices/perf/hexagon-htp.toml), here written out into one file."""
    from kzlab.analysis.placement.capabilities import DIR, load

    own = (DIR / "hexagon-v0.15.2.toml").read_text().replace('perf_base = "hexagon-htp"', "")
    base = (DIR / "perf" / "hexagon-htp.toml").read_text()
    bw = "bandwidth_gbs = { value = 20.0, low = 4.0, high = 70.0"
    assert bw in base
    hmx = '"MUL_MAT.F16.hmx" = { value = 1000.0, low = 50.0, high = 25000.0, public = [1210.0, 20960.0]'
    assert hmx in base
    for bad, match in ((base.replace("sync_us = { value = 300.0", "sync_us = { value = -1.0"), "sync_us"),
                       (base.replace("[memory]", "[memory]\nbudget_gb = 2"), "unknown key"),
                       (base.replace(bw, bw.replace("value = 20.0", "value = 0")), "bandwidth_gbs"),
                       (base.replace(bw, bw.replace("low = 4.0", "low = 40.0")), "low 40 > value 20"),
                       (base.replace(bw, bw.replace("high = 70.0", "high = 10.0")), "value 20 > high 10"),
                       (base.replace(bw, bw.replace("low = 4.0", "low = -1.0")), "bandwidth_gbs.low"),
                       (base.replace(bw, bw.replace("low = 4.0", "lo = 4.0")), "unknown key"),
                       # a public interval the plausible range leaves out
                       (base.replace(hmx, hmx.replace("public = [1210.0, 20960.0]", "public = [1210.0, 30000.0]")),
                        "public interval .* lies outside its range"),
                       (base.replace(hmx, hmx.replace("public = [1210.0, 20960.0]", "public = [2000.0, 1210.0]")),
                        "public: low 2000 > high 1210"),
                       (base.replace(hmx, hmx.replace("public = [1210.0, 20960.0]", "public = 1210.0")),
                        "expected \\[LOW, HIGH\\]"),
                       # an unknown product path, an unknown op class
                       (base.replace('"MUL_MAT.F16.hmx" =', '"MUL_MAT.F16.tensor" ='), "unknown path 'tensor'"),
                       (base.replace("elementwise = {", "streaming = {"), "not an op class"),
                       (base.replace('"MUL_MAT.F16.hvx" =', '"MULMAT.F16.hvx" ='), "MULMAT is not an op name")):
        p = tmp_path / "bad.toml"
        p.write_text(own + "\n" + bad)
        with pytest.raises(InvalidOptionError, match=match):
            load(p)
    p.write_text(own + "\n" + base)
    assert load(p).perf["gflops"]["MUL_MAT.F16.hmx"]["public"] == [1210.0, 20960.0]
