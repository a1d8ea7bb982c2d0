"""kzlab.profile: node times from the scheduler's callback (measured stretches, apportioned within), the op table,
aggregates, JSON and the CLI. No timing thresholds: the machine is shared."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY, run_cli, snr_db

import kzlab
from kzlab.analysis.evolution import channel_path, time_path
from kzlab.analysis.flops import TensorInfo, op_bytes, op_flops
from kzlab.runtime.profiler import NodeInfo, plan_stretches
from kzlab.runtime.rpc import rpc_server

FRAMES = 6
LAYER_FIELDS = {
    "path", "stage", "kind", "c_in", "c_out", "kernel", "t_in", "t_out", "macs", "macs_seed", "time_ms", "flops",
    "bytes", "backend",
}  # fmt: skip
NODE_FIELDS = {
    "name", "op", "layer", "stage", "backend", "time_ms", "spread_ms", "flops", "bytes", "ne", "src_ne", "timing",
    "stretch", "stretch_ms",
}  # fmt: skip
TIMINGS = {"measured", "apportioned", "view"}


def f32(*ne: int) -> TensorInfo:
    ne4 = tuple(ne) + (1,) * (4 - len(ne))
    return TensorInfo(ne4, "F32", 4 * int(np.prod(ne4)))


def test_custom_nodes_are_counted_by_their_family():
    """A CUSTOM node's FLOPs come from the model's family (Arch.custom_flops), not from a guess in the op table."""
    from kzlab.arch import get_arch

    qwen, wt = get_arch("qwen3-tts-12hz"), get_arch("wavtokenizer-dec")
    c, k, t = 4, 3, 10
    unit = [f32(t, c), f32(c), f32(c), f32(c, c, k), f32(c), f32(c), f32(c), f32(c, c, 1), f32(c)]
    out = f32(t, c)
    assert op_flops("CUSTOM", out, unit, custom=qwen.custom_flops) == 2 * t * c * c * (k + 1) + 13 * t * c
    assert qwen.custom_label("x:CUSTOM", unit) == "residual unit"
    convt = [f32(t, c), f32(c), f32(c), f32(2 * c, 4, c), f32(2 * c)]
    out_t = f32(2 * t, 2 * c)
    assert op_flops("CUSTOM", out_t, convt, custom=qwen.custom_flops) == 2 * t * c * 4 * 2 * c + 5 * t * c + 2 * out_t.n
    assert op_flops("CUSTOM", out, unit[:3], custom=qwen.custom_flops) == 5 * out.n  # the SnakeBeta node
    # a unit whose conv runs by Winograd's F(4, 7) (10 matrices) counts the direct conv's products, as its layer does
    wino = unit[:3] + [f32(c, c, 10)] + unit[4:]
    assert op_flops("CUSTOM", out, wino, custom=qwen.custom_flops) == 2 * t * c * c * (7 + 1) + 13 * t * c
    # WavTokenizer's normalised conv (x, F(6, 3)'s 8 matrices, bias, affine, residual) and its statistics node
    conv, out_cl = [f32(c, t), f32(c, c, 8), f32(c), f32(c, 2), f32(c, t)], f32(c, t)
    assert op_flops("CUSTOM", out_cl, conv, custom=wt.custom_flops) == 2 * t * c * c * 3 + 6 * t * c + 2 * t * c
    assert wt.custom_label("x:CUSTOM", conv[:3]) == "normalised conv"
    assert op_flops("CUSTOM", f32(c, 2), conv[:1] + [f32(c, 2)], custom=wt.custom_flops) == 5 * t * c
    # a family without custom nodes claims none; an unclaimed CUSTOM node counts as a pointwise chain
    assert wt.custom_flops("x:CUSTOM", out, unit) is None and wt.custom_label("x:CUSTOM", unit) is None
    assert op_flops("CUSTOM", out, unit, custom=wt.custom_flops) == op_flops("CUSTOM", out, unit) == 5 * out.n


def test_fused_nodes_in_a_profile_are_labelled_and_counted_by_the_family(ref):
    p = kzlab.profile(TINY / "qwentts-tokenizer-f32.gguf", frames=2, threads=1, repeat=1, warmup=0, peak=False,
                      mode="fast")  # fmt: skip
    fused = [n for n in p.nodes if n["op"].startswith("CUSTOM")]
    assert fused and {n["fused"] for n in fused} <= {"residual unit", "snake + transposed conv", "snake"}
    units = [n for n in fused if n["fused"] == "residual unit"]
    assert units and all(n["flops"] > 13 * np.prod(n["ne"]) for n in units)  # the products are counted
    groups = p.by_group()
    assert [g["group"] for g in groups][:1] == [p.config["stage_groups"][p.by_stage()[0]["stage"]]]
    assert sum(g["share"] for g in groups) == pytest.approx(sum(r["share"] for r in p.by_stage()))


def test_op_table():
    # MUL_MAT: src0 [K, M], src1 [K, N, B] -> [M, N, B]: 2 M N K B
    assert op_flops("MUL_MAT", f32(5, 7, 3), [f32(11, 5), f32(11, 7, 3)]) == 2 * 5 * 7 * 11 * 3
    # conv transpose (direct): kernel [K, Cout, Cin], x [T, Cin]: algorithmic 2 Cin Cout K T_in
    k = TensorInfo((16, 4, 6, 1), "F16", 2 * 16 * 4 * 6)
    assert op_flops("CONV_TRANSPOSE_1D", f32(100, 4), [k, f32(10, 6)]) == 2 * 6 * 4 * 16 * 10
    for op in ("IM2COL", "COL2IM_1D", "PAD", "CONT", "CPY", "CONCAT", "GET_ROWS"):
        assert op_flops(op, f32(8, 8), [f32(8, 8)]) == 0
        assert op_bytes(op, f32(8, 8), [f32(8, 8)]) > 0
    assert op_flops("SIN", f32(10, 3), [f32(10, 3)]) == 30
    assert op_flops("ADD", f32(10, 3), [f32(10, 3), f32(10, 1)]) == 30
    assert op_bytes("ADD", f32(10, 3), [f32(10, 3), f32(10, 1)]) == 4 * (30 + 10 + 30)
    assert op_bytes("RESHAPE", f32(10, 3), [f32(30)]) == 0


@pytest.fixture(scope="module")
def prof(ref):
    return kzlab.profile(
        TINY / "qwentts-tokenizer-f32.gguf", codes=ref["codes"][:, :FRAMES], threads=1, repeat=3, peak=False
    )


def test_profile_times_and_fields(prof, ref):
    assert snr_db(prof.wav, ref["wav"][: FRAMES * 1920]) >= 70
    # the callback timestamps tile each profiled run: their sum is that run's wall time within 10 %
    runs = list(zip(prof.config["node_sum_all_ms"], prof.config["profiled_all_ms"], strict=True))
    assert len(runs) == 3 and all(abs(s - w) <= 0.1 * w for s, w in runs), runs
    pairs = [p / w for p, w in zip(prof.config["profiled_all_ms"], prof.config["wall_all_ms"], strict=True)]
    assert prof.config["overhead_pair_ratios"] == pytest.approx(pairs)
    assert prof.overhead_ratio == pytest.approx(sorted(pairs)[1])  # the median of 3
    assert prof.wall_ms > 0 and len(prof.config["wall_all_ms"]) == 3
    assert all(LAYER_FIELDS <= set(r) for r in prof.layers)
    assert all(NODE_FIELDS <= set(n) for n in prof.nodes)
    assert all(n["time_ms"] >= 0 and n["spread_ms"] >= 0 for n in prof.nodes)
    assert all(n["time_ms"] == 0 for n in prof.nodes if n["is_view"])
    compute = [n for n in prof.nodes if not n["is_view"]]
    assert sum(n["time_ms"] > 0 for n in compute) > 0.9 * len(compute)
    for key in ("conv", "conv_src1", "convt", "mm_chunk", "snake", "wtype", "backend", "threads", "sched"):
        assert key in prof.config
    assert prof.config["frames"] == FRAMES and prof.config["versions"]["kzlab"] == kzlab.__version__
    assert [r["path"] for r in prof.layers][:2] == ["vq.first", "vq.rest"]


def check_stretches(p) -> dict[int, list[dict]]:
    """The node rows of `p` cover every node once and tile its measured stretches; returns rows per stretch."""
    assert [n["index"] for n in p.nodes] == list(range(p.config["n_nodes"]))
    assert all(n["time_ms"] >= 0 and n["spread_ms"] >= 0 and n["timing"] in TIMINGS for n in p.nodes)
    assert all(n["timing"] == "view" and n["time_ms"] == 0 for n in p.nodes if n["is_view"])
    assert all(n["timing"] != "view" for n in p.nodes if not n["is_view"])
    per: dict[int, list[dict]] = {}
    for n in p.nodes:
        per.setdefault(n["stretch"], []).append(n)
    assert sorted(per) == list(range(p.config["n_stretches"]))
    for rows in per.values():
        compute = [n for n in rows if not n["is_view"]]
        assert len({n["stretch_ms"] for n in rows}) == 1  # one measured time per stretch
        # a stretch's rows share out exactly its measured time; one compute node alone is measured, not shared
        assert sum(n["time_ms"] for n in rows) == pytest.approx(rows[0]["stretch_ms"], rel=1e-9, abs=1e-12)
        assert {n["timing"] for n in compute} == ({"measured"} if len(compute) == 1 else {"apportioned"})
        assert len({n["backend"] for n in compute}) == 1  # a stretch never spans two backends
        idx = [n["index"] for n in rows]
        assert idx == list(range(idx[0], idx[0] + len(idx)))  # consecutive nodes
    assert p.node_time_ms == pytest.approx(sum(r[0]["stretch_ms"] for r in per.values()))
    c = p.config
    assert c["n_measured"] == sum(n["timing"] == "measured" for n in p.nodes)
    assert c["n_apportioned"] == sum(n["timing"] == "apportioned" for n in p.nodes)
    assert 0 <= c["measured_share"] <= 1
    return per


def test_default_granularity_is_auto_and_honest(prof):
    c = prof.config
    assert c["granularity"] == c["granularity_requested"] == "auto" and c["stretch_budget"] > 0
    assert c["stretches_planned_on"] == "calibration"
    # the warm-up's profiled run was taken node by node and weighs the nodes of each stretch
    assert c["apportion"] == "calibrated" and c["apportion_requested"] == "auto" and c["calibration_runs"] == 1
    per = check_stretches(prof)
    compute = [n for n in prof.nodes if not n["is_view"]]
    assert 1 < len(per) < len(compute)  # far fewer separate computes than compute nodes
    assert c["n_apportioned"] > 0 and c["n_measured"] + c["n_apportioned"] == len(compute)


def test_node_granularity_measures_every_node(ref):
    p = kzlab.profile(
        TINY / "qwentts-tokenizer-f32.gguf", codes=ref["codes"][:, :FRAMES], threads=1, repeat=2, peak=False,
        granularity="node",
    )  # fmt: skip
    c = p.config
    assert c["granularity"] == "node" and c["apportion"] == "none" and c["calibration_runs"] == 0
    assert c["stretch_budget"] == 0 and c["stretches_planned_on"] == ""
    check_stretches(p)
    compute = [n for n in p.nodes if not n["is_view"]]
    assert c["n_stretches"] == len(compute) and c["n_measured"] == len(compute) and c["n_apportioned"] == 0
    assert all(n["timing"] == "measured" and n["time_ms"] == n["stretch_ms"] for n in compute)
    assert c["measured_share"] == 1.0
    assert snr_db(p.wav, ref["wav"][: FRAMES * 1920]) >= 70


def test_layer_granularity_without_warmup_uses_the_roofline(ref):
    p = kzlab.profile(
        TINY / "qwentts-tokenizer-f32.gguf", frames=2, threads=1, repeat=1, warmup=0, peak=False,
        granularity="layer", mode="portable",
    )  # fmt: skip
    c = p.config
    assert c["granularity"] == "layer" and c["apportion"] == "roofline" and c["calibration_runs"] == 0
    assert c["roofline_machine"]["nominal"]
    per = check_stretches(p)
    for rows in per.values():
        assert len({n["layer"] for n in rows if not n["is_view"]}) == 1  # a stretch is one layer's run
    auto = kzlab.profile(TINY / "qwentts-tokenizer-f32.gguf", frames=2, threads=1, repeat=1, warmup=0, peak=False)
    assert auto.config["apportion"] == "roofline" and auto.config["granularity"] == "auto"
    assert auto.config["stretches_planned_on"] == "roofline"  # no warm-up: planned on the op table's estimate
    check_stretches(auto)


def info(i: int, layer: str, op: str = "ADD", backend: str = "cpu", split: int = 0) -> NodeInfo:
    return NodeInfo(
        i, f"{layer}:{op}", op, layer, (1, 1, 1, 1), "F32", 4, [], [], [], [], backend=backend, is_view=op == "VIEW",
        split=split,
    )  # fmt: skip


def test_plan_stretches():
    nodes = [
        info(0, "a"), info(1, "a", "VIEW"), info(2, "a"), info(3, "b", "MUL_MAT"), info(4, "b"),
        info(5, "c", backend="blas", split=1), info(6, "c", "VIEW", "blas", 1), info(7, "d", split=2),
        info(8, "d", split=2), info(9, "d", "VIEW", split=2),
    ]  # fmt: skip

    def spans(st) -> list[list[int]]:
        return [s.nodes for s in st]

    # a view runs with (and is timed in) the stretch of the next compute node, a trailing view with the last
    # stretch; the end of a split always closes a stretch
    assert spans(plan_stretches(nodes, "node")) == [[0], [1, 2], [3], [4], [5], [6, 7], [8, 9]]
    assert spans(plan_stretches(nodes, "layer")) == [[0, 1, 2], [3, 4], [5], [6, 7, 8, 9]]
    assert spans(plan_stretches(nodes, "split")) == [[0, 1, 2, 3, 4], [5], [6, 7, 8, 9]]
    assert spans(plan_stretches(nodes, 2)) == [[0, 1, 2], [3, 4], [5], [6, 7, 8, 9]]
    st = plan_stretches(nodes, "layer")
    assert [s.compute for s in st] == [[0, 2], [3, 4], [5], [7, 8]] and [s.backend for s in st][2] == "blas"
    assert [s.measured_alone for s in st] == [False, False, True, False]
    # "auto": the big MUL_MAT (at least 1/budget of the estimated run) alone; small nodes gather up to that
    est = {0: 1.0, 2: 1.0, 3: 50.0, 4: 1.0, 5: 1.0, 7: 1.0, 8: 1.0}
    assert spans(plan_stretches(nodes, "auto", est, budget=4)) == [[0, 1, 2], [3], [4], [5], [6, 7, 8, 9]]
    with pytest.raises(ValueError):
        plan_stretches(nodes, "auto")
    for bad in ("nodes", 0, -1, True, 1.5):
        with pytest.raises(kzlab.InvalidOptionError):
            plan_stretches(nodes, bad)


def test_granularity_errors():
    path = TINY / "qwentts-tokenizer-f32.gguf"
    for kw in ({"granularity": "bogus"}, {"granularity": 0}, {"apportion": "nope"}, {"budget": 0}):
        with pytest.raises(kzlab.InvalidOptionError):
            kzlab.profile(path, frames=2, repeat=1, peak=False, **kw)
    with pytest.raises(kzlab.InvalidOptionError):  # calibrating needs a warm-up run to calibrate on
        kzlab.profile(path, frames=2, repeat=1, warmup=0, peak=False, apportion="calibrated")


def test_aggregates_add_up(prof):
    total = prof.node_time_ms
    assert sum(r["time_ms"] for r in prof.by_op()) == pytest.approx(total)
    assert sum(r["time_ms"] for r in prof.by_stage()) == pytest.approx(total)
    assert sum(r["flops"] for r in prof.by_op()) == sum(n["flops"] for n in prof.nodes)
    # a conv layer's matrix products cost at least its MACs (bias adds and im2col on top); a conv fused into a
    # residual unit is counted in the unit's node, with the rest of the unit
    fused_macs: dict[str, int] = {}
    for lay in prof.layers:
        if lay["kind"] == "conv1d" and lay["extra"].get("groups") is None:
            if "fused_into" in lay["extra"]:
                assert lay["flops"] == 0 and lay["time_ms"] == 0
                unit = lay["extra"]["fused_into"]
                fused_macs[unit] = fused_macs.get(unit, 0) + lay["macs"]
            else:  # ktap-acc's products skip the padding's zeros, and say how many multiply-adds they did
                done = lay["extra"].get("product_macs", lay["macs"])
                assert done <= lay["macs"] and lay["flops"] >= 2 * done, lay["path"]
    units = {lay["path"]: lay for lay in prof.layers if lay["kind"] == "residual_unit"}
    assert set(units) == set(fused_macs) and len(units) == 12  # the default lowering fuses every unit
    for path, macs in fused_macs.items():
        assert units[path]["flops"] >= 2 * macs and units[path]["time_ms"] > 0, path
    # the units' dilated convs ran by Winograd's F(4, 7): the record keeps the conv's MACs and says what its products
    # did (10 per 4 output frames against 28)
    convs = [lay for lay in prof.layers if lay["path"].endswith(".conv1") and "fused_into" in lay["extra"]]
    assert len(convs) == 12 and all(lay["extra"]["algorithm"] == "winograd F(4, 7)" for lay in convs)
    assert all(lay["extra"]["product_macs"] == lay["c_in"] ** 2 * 10 * -(-lay["t_out"] // 4) for lay in convs)
    mm = [r for r in prof.by_op() if r["op"] == "MUL_MAT"][0]
    assert mm["flops"] > 0 and mm["n"] > 10
    assert prof.rows("stages") == prof.by_stage()
    with pytest.raises(kzlab.InvalidOptionError):
        prof.rows("nope")
    d = prof.to_dict()
    assert "wav" not in d and json.loads(json.dumps(d))["overhead_ratio"] == pytest.approx(prof.overhead_ratio)


def test_dataframe(prof):
    pd = pytest.importorskip("pandas")
    df = prof.dataframe("nodes")
    assert isinstance(df, pd.DataFrame) and len(df) == len(prof.nodes)


def test_profile_rpc_plain_and_sched(ref):
    codes = ref["codes"][:, :FRAMES]
    with rpc_server(threads=1) as srv:
        kw = dict(codes=codes, threads=1, repeat=1, peak=False)
        plain = kzlab.profile(TINY / "qwentts-tokenizer-f32.gguf", backend=srv.address, **kw)
        p = kzlab.profile(TINY / "qwentts-tokenizer-f32.gguf", backend=[srv.address, "cpu"], **kw)
    # plain RPC: profiled through a scheduler of its own, every node stays on the server, nothing is copied
    assert snr_db(plain.wav, ref["wav"][: FRAMES * 1920]) >= 70 and not plain.config["sched"]
    assert plain.config["isolated"] == p.config["isolated"] == "worker process"  # as decode: a lost server can't abort
    assert {n["backend"] for n in plain.nodes} == {srv.address}
    assert len(plain.splits) == 1 and plain.splits[0]["input_bytes"] == 0
    assert snr_db(p.wav, ref["wav"][: FRAMES * 1920]) >= 70
    assert p.config["sched"] and p.config["n_splits_read"] == p.config["n_splits_derived"] == len(p.splits)
    # the codes, positions and mask live on the CPU and are copied to the server's split
    rpc_splits = [s for s in p.splits if s["backend"] == srv.address]
    assert rpc_splits and sum(s["input_bytes"] for s in rpc_splits) > 0
    assert {n["backend"] for n in p.nodes if not n["is_view"]} == {srv.address}
    for prof in (plain, p):
        ((s, w),) = zip(prof.config["node_sum_all_ms"], prof.config["profiled_all_ms"], strict=True)
        assert abs(s - w) <= 0.1 * w
        check_stretches(prof)


def test_profile_sched_blas_splits_match_the_scheduler(ref):
    p = kzlab.profile(
        TINY / "qwentts-tokenizer-f32.gguf", frames=FRAMES, backend="blas", threads=1, repeat=1, peak=False,
        convt="col2im",  # with the fused nodes, none of the tiny model's products is big enough for BLAS
    )  # fmt: skip
    assert p.config["n_splits_read"] == p.config["n_splits_derived"] > 1
    assert {s["backend"] for s in p.splits} == {"blas", "cpu"}
    # every split ends a stretch: the stretches' times add up to the splits' times
    check_stretches(p)
    assert p.config["n_stretches"] >= p.config["n_splits_derived"]
    assert sum(s["time_ms"] for s in p.splits) == pytest.approx(p.node_time_ms)


def test_lowering_keywords_and_errors():
    p = kzlab.profile(TINY / "qwentts-tokenizer-f32.gguf", frames=2, conv="ktap", repeat=1, warmup=0, peak=False)
    assert p.config["conv"] == "ktap" and p.config["lowering"]["conv"] == "ktap"
    with pytest.raises(kzlab.InvalidOptionError):
        kzlab.profile(TINY / "qwentts-tokenizer-f32.gguf", frames=0)
    with pytest.raises(kzlab.InvalidOptionError):
        kzlab.profile(TINY / "qwentts-tokenizer-f32.gguf", frames=2, repeat=0)


def test_cli_profile_json(tmp_path):
    out, trace = tmp_path / "p.json", tmp_path / "t.json"
    p = run_cli(
        "profile", str(TINY / "qwentts-tokenizer-f32.gguf"), "--frames", "3", "--repeat", "1", "--threads", "1",
        "--no-peak", "--json", str(out), "--trace", str(trace),
    )  # fmt: skip
    assert "decoder.4" in p.stdout and "MUL_MAT" in p.stdout and "overhead" in p.stdout
    assert "by block (qwen3-tts-12hz): " in p.stdout and "BigVGAN" not in p.stdout
    d = json.loads(out.read_text())
    for key in ("config", "wall_ms", "overhead_ratio", "layers", "nodes"):
        assert key in d
    assert d["layers"][0]["path"] == "vq.first" and {"name", "op", "layer", "backend", "time_ms"} <= set(d["nodes"][0])
    assert json.loads(trace.read_text())["traceEvents"]


def test_profile_of_one_streaming_call():
    """`profile(stream=K)` times one call of a stateful stream: the streaming graph of K frames at the position the
    warm-up calls reached, with the state they left; its audio is the stream's own call's, and the config says so."""
    path = TINY / "qwentts-tokenizer-f32.gguf"
    p = kzlab.profile(path, stream=3, warm=6, repeat=1, peak=False, progress=False, threads=2)
    c = p.config
    st = c["stream"]
    assert c["frames"] == 3 and st["call_frames"] == 3 and st["position"] == 6 and st["warmed_by"] == [3, 3]
    assert c["graph"] == "one streaming call of 3 frames at position 6"
    assert st["state_tensors"] == len(st["state"]) > 0 and st["state_bytes"] == sum(r["nbytes"] for r in st["state"])
    assert {r["kind"] for r in st["state"]} == {"context", "kv"}
    # what ran is the streaming plan (the fast mode's unit conv direct), and the config says which choice changed
    assert c["lowering_resolved"]["unitconv"] == "direct" and set(st["plan_changes"]) == {"unitconv"}
    assert "unitconv=winograd" not in c["lowering_label"]
    assert json.loads(json.dumps(p.to_dict()))["config"]["stream"]["position"] == 6
    # the graph reads the state: a node concatenates it in front of the call's frames
    assert any(n["op"] == "CONCAT" for n in p.nodes) and p.node_time_ms > 0
    with kzlab.load(path, threads=2) as dec:
        codes = kzlab.random_codes(dec.hparams, 9, 0)  # the profile's random frames (seed 0)
        s = dec.stream()
        s.push(codes[:, :3])
        s.push(codes[:, 3:6])
        want = s.push(codes[:, 6:9])
    assert p.wav.shape == want.shape and snr_db(p.wav, want) >= 100
    # by default the warm-up fills the longest state tensor (an attention layer's window of keys)
    d = kzlab.profile(path, stream=4, codes=None, repeat=1, warmup=0, peak=False, progress=False, threads=2)
    longest = max(r["frames"] for r in d.config["stream"]["state"])
    assert d.config["stream"]["position"] == -(-longest // 4) * 4


def test_profile_stream_refusals(tmp_path):
    path = TINY / "qwentts-tokenizer-f32.gguf"
    for bad in ({"stream": 0}, {"stream": 2, "warm": -1}, {"stream": 3, "codes": np.zeros((16, 3), np.int32)},
                {"stream": 2, "warm": 2, "codes": np.zeros((16, 5), np.int32)}):
        with pytest.raises(kzlab.InvalidOptionError):
            kzlab.profile(path, repeat=1, warmup=0, peak=False, progress=False, **bad)
    wt = tmp_path / "wt.gguf"
    run_cli("synth", "--preset", "wavtokenizer-dec-tiny", "--dtype", "f32", "-o", str(wt), "-q")
    with pytest.raises(kzlab.InvalidOptionError, match="not causal"):
        kzlab.profile(wt, stream=2, repeat=1, warmup=0, peak=False, progress=False)


def test_cli_profile_stream_json(tmp_path):
    out = tmp_path / "s.json"
    p = run_cli(
        "profile", str(TINY / "qwentts-tokenizer-f32.gguf"), "--stream", "2", "--warm", "4", "--repeat", "1",
        "--threads", "1", "--no-peak", "--json", str(out),
    )  # fmt: skip
    assert "one streaming call of 2 frames at position 4" in p.stdout and "MUL_MAT" in p.stdout
    d = json.loads(out.read_text())
    assert d["config"]["frames"] == 2 and d["config"]["stream"]["call_frames"] == 2
    assert d["config"]["samples"] == 2 * 1920


@pytest.mark.slow
def test_full_size_bigvgan_table(full_synth, capsys):
    prof = kzlab.profile(full_synth, frames=31, repeat=1, warmup=0, peak=False)
    big = [r for r in prof.layers if r["stage"].startswith("decoder.")]
    conv = [r for r in big if r["kind"] == "conv1d"]
    convt = [r for r in big if r["kind"] == "conv_transpose1d"]
    snake = [r for r in big if r["kind"] == "snake"]
    assert len(conv) == 26 and len(convt) == 4 and len(snake) == 29
    assert round(sum(r["macs_seed"] for r in conv) / 1e9, 1) == 63.7
    assert round(sum(r["macs_seed"] for r in convt) / 1e9, 1) == 51.6
    assert round(sum(r["macs"] for r in convt) / 1e9, 1) == 10.4
    evo = [r for r in prof.evolution if r["stage"].startswith("decoder.")]
    assert channel_path(evo) == [1024, 1536, 768, 384, 192, 96, 1]
    assert time_path(evo) == [124, 992, 4960, 19840, 59520]
    share = prof.share("decoder.")
    assert 0 < share <= 1
    stages = ", ".join(f"{r['stage']} {r['time_ms']:.0f}" for r in prof.by_stage())
    with capsys.disabled():
        print(
            f"\nfull size, 31 frames: BigVGAN (decoder.0-6) {100 * share:.1f}% of {prof.node_time_ms:.0f} ms; "
            f"plain {prof.wall_ms:.0f} ms, profiled {prof.profiled_ms:.0f} ms, overhead x{prof.overhead_ratio:.3f}"
            f"\nper stage (ms): {stages}"
        )
