"""The HTP's time model as ggml-hexagon's source has it: cache maintenance per op (a flush of the whole data cache
for a tensor above the threshold, by address below it), the vector peaks derived from the DSP's clock and thread
count, a first decode that maps the device's buffers against a warm one that does not, and a rate of its own for
products longer than any public HMX figure.

The placements here are a handful of nodes written out by hand: what is checked is how the model prices them,
which does not depend on a decoder.
"""

from __future__ import annotations

import math

import pytest

from kzlab.analysis.placement import capabilities
from kzlab.analysis.predict.draws import Draws, ParameterSpace
from kzlab.analysis.predict.parameters import LONG_ROWS, backend_perf
from kzlab.analysis.predict.timing import predict
from kzlab.errors import InvalidOptionError

KIB = 1024


def htp_perf(profile: str = "hexagon-v0.15.3", **cache):
    table = dict(capabilities.load(profile).perf)
    if cache:
        table["cache"] = {**table["cache"], **cache}
    return backend_perf("HTP", table, "test")


def perfs(htp=None):
    return {"htp": htp or htp_perf(), "cpu": backend_perf("CPU", capabilities.load("cpu").perf, "test")}


def node(name, op, ne, backend="HTP", stage="decoder.0", type_="F32", src_ne=None, src_types=None, path="",
         flops=0):
    n = math.prod(ne)
    return {"name": name, "op": op, "backend": backend, "stage": stage, "ne": tuple(ne), "type": type_,
            "src_ne": src_ne or [tuple(ne)], "src_types": src_types or [type_], "flops": flops or n,
            "bytes": 8 * n, "path": path}


def split(backend, n_nodes, inputs=(), input_bytes=0, stage="decoder.0"):
    return {"backend": backend, "n_nodes": n_nodes, "input_bytes": input_bytes, "n_inputs": len(inputs),
            "inputs": list(inputs), "first_node": "", "stage": stage}


CONFIG = {"frames": 4, "weights_on": "HTP"}
BIG = (1024, 64, 1, 1)  # 256 KiB in F32: above 0.15.x's 128 KiB
SMALL = (256, 16, 1, 1)  # 16 KiB


def three_ops():
    """A device split of two ops (one output above the threshold, one below) and a view, after a CPU op whose
    output (256 KiB) is the split's one input."""
    nodes = [node("x", "ADD", BIG, backend="CPU"),
             node("a", "ADD", BIG), node("v", "VIEW", BIG), node("b", "MUL", SMALL)]
    splits = [split("CPU", 1), split("HTP", 3, inputs=["x"], input_bytes=256 * KIB)]
    return nodes, splits


def test_cache_maintenance_is_per_op_a_whole_flush_above_the_threshold():
    """0.15.x: the CPU-written input and the large output each cost one flush of the whole cache, whatever their
    size; the small output a pass by address over its bytes; the view nothing; the CPU's split nothing (the host
    flushes only its message buffer)."""
    nodes, splits = three_ops()
    perf = perfs()
    p = predict(nodes, splits, CONFIG, perf, draws=50)
    cpu_row, htp_row = p.splits
    assert cpu_row["cache_ms"] == 0.0 and "cache_flushes" not in cpu_row
    assert htp_row["cache_flushes"] == 2 and htp_row["cache_bytes_by_address"] == 16 * KIB
    hp = perf["htp"]
    want = 2 * hp.l2flush_us.value / 1e3 + 16 * KIB / (hp.cache_gbs.value * 1e9) * 1e3
    assert htp_row["cache_ms"] == pytest.approx(want)
    kinds = sorted((t[0], t[1], t[2]) for t in p.costs.split_terms if t[0] in ("flush", "cache"))
    assert kinds == [("cache", 16 * KIB, "HTP.cache_gbs"), ("flush", 2.0, "HTP.l2flush_us")]
    # a tensor ten times larger above the threshold costs the same flush; below it, the bytes count
    bigger = [dict(n, ne=(10240, 64, 1, 1)) if n["name"] == "a" else n for n in nodes]
    again = predict(bigger, splits, CONFIG, perf, draws=50).splits[1]
    assert again["cache_flushes"] == 2 and again["cache_ms"] == pytest.approx(htp_row["cache_ms"])
    # the drawn model evaluates the same terms: at the stated values it is the rows' sum
    space = ParameterSpace()
    space.add(p.parameters)
    ev = p.costs.evaluate(Draws(space.names, space.nominal(), 0, space.params))
    assert float(ev["cache"][0]) == pytest.approx(htp_row["cache_ms"])


def test_the_v0_21_scheme_flushes_per_batch_and_not_the_cpu_inputs():
    """v0.21.0 on (dirty ranges): a flush of the whole cache at each batch's start and end, outputs up to 4 MiB by
    address, the CPU's inputs not flushed before use."""
    nodes, splits = three_ops()
    v21 = htp_perf(flush_all_bytes=4 * KIB * KIB, inputs=False, batch_flushes=2)
    row = predict(nodes, splits, CONFIG, perfs(v21), draws=20).splits[1]
    assert row["cache_flushes"] == 2 and row["cache_bytes_by_address"] == 256 * KIB + 16 * KIB
    # a split of more ops than a batch holds goes in two batches: four flushes
    small = htp_perf(flush_all_bytes=4 * KIB * KIB, inputs=False, batch_flushes=2, batch_ops=1)
    assert predict(nodes, splits, CONFIG, perfs(small), draws=20).splits[1]["cache_flushes"] == 4


def test_the_profiles_state_the_source_scheme_and_a_public_flush():
    perf = htp_perf("hexagon-v0.15.2")
    assert perf.cache.flush_all_bytes == 128 * KIB and perf.cache.inputs and perf.cache.batch_flushes == 0
    assert "707321c4" in perf.cache.source
    flush = perf.l2flush_us
    # #26501's traced L2FLUSH: 12090 cycles at 2114 cycles/us
    assert flush.public == (5.7, 5.7) and abs(12090 / 2114 - 5.7) < 0.05 and "#26501" in flush.public_source
    assert flush.low <= 5.7 <= flush.high and flush.uncertain
    with pytest.raises(InvalidOptionError, match="l2flush_us"):
        table = dict(capabilities.load("hexagon-v0.15.3").perf)
        table.pop("l2flush_us")
        backend_perf("HTP", table, "test")


def test_the_hvx_peak_derives_from_the_clock_and_the_threads():
    """The public traces count ~2.11 cycles per ns (#18139: 10,672,609 cycles in 5053 us; #26501: 2114 cycles/us);
    8 threads x 32 F32 lanes at that clock is the peak that bounds the vector rates, and a range above it is
    refused."""
    perf = htp_perf()
    hw = perf.hardware
    assert abs(10_672_609 / 5053 - hw.clock_mhz) / hw.clock_mhz < 0.01
    assert (hw.soc, hw.threads, hw.vtcm_bytes, hw.f32_lanes) == ("SM8850", 8, 8 * KIB * KIB, 32)
    assert "#25876" in hw.source
    peak = hw.hvx_peak_gflops("F32")
    assert peak == pytest.approx(8 * 32 * 2.114)
    assert 0.99 * peak <= perf.gflops["default"].high <= peak  # the bound is the peak at ~2.1 GHz, not ~1 GHz
    assert hw.hvx_peak_gflops("F16") == pytest.approx(2 * peak)
    table = dict(capabilities.load("hexagon-v0.15.3").perf)
    table["gflops"] = {**table["gflops"], "default": {"value": 20.0, "low": 2.0, "high": 1000.0, "source": "x"}}
    with pytest.raises(InvalidOptionError, match="HVX F32 peak"):
        backend_perf("HTP", table, "test")
    table["hardware"] = {**table["hardware"], "clock_mhz": 4000.0}  # a faster clock lets that bound stand
    backend_perf("HTP", table, "test")
    # the facts a prediction's bounds rest on are listed with it, with their SoC
    nodes, splits = three_ops()
    names = {q.name: q for q in predict(nodes, splits, CONFIG, perfs(), draws=5).parameters}
    assert names["HTP.hardware.threads"].value == 8 and "SM8850" in names["HTP.hardware.threads"].source
    assert names["HTP.hardware.vtcm_bytes"].value == 8 * KIB * KIB


def test_a_first_decode_pays_the_mappings_a_warm_one_does_not():
    nodes, splits = three_ops()
    p = predict(nodes, splits, CONFIG, perfs(), draws=300, seed=3)
    assert p.first_buffers == 2  # the compute buffer and the weights' buffer
    space = ParameterSpace.shared_by({"p": p})
    draws = space.sample(300, 3)
    ev = p.costs.evaluate(draws)
    maps = draws.column("HTP.map_us")
    assert ev["first"] == pytest.approx(2 * maps / 1e3)  # first - warm = the mappings, draw by draw
    assert p.costs.evaluate(draws, parts=False)["total"] == pytest.approx(ev["total"])  # warm: what decisions use
    assert p.first_range["p50"] > p.range["p50"] and p.first_ms > 0
    d = p.to_dict()
    assert d["first_decode"]["buffers_mapped"] == 2 and "FASTRPC_MAP_FD_DELAYED" in d["first_decode"]["what"]
    # weights on the CPU: the device maps its compute buffer only
    assert predict(nodes, splits, {**CONFIG, "weights_on": "CPU"}, perfs(), draws=5).first_buffers == 1


def test_products_longer_than_the_public_figures_are_said_to_be_extrapolated():
    """Every public HMX figure is of a product with at most LONG_ROWS src1 rows: a longer product takes the one HMX
    rate with a note that says it is extrapolated there; a profile that measured long products gives them a
    `.long` rate of their own, which they then take (and the note says so)."""

    def product(rows):
        return node("mm", "MUL_MAT", (384, rows, 1, 1), type_="F32", src_ne=[(2688, 384, 1, 1), (2688, rows, 1, 1)],
                    src_types=["F16", "F16"], path="hmx", flops=2 * 384 * rows * 2688)

    short = predict([product(LONG_ROWS)], [split("HTP", 1)], CONFIG, perfs(), draws=5)
    assert short.nodes[0]["rate"] == "HTP.gflops.MUL_MAT.F16.hmx" and not any("extrapolated" in n for n in short.notes)
    long = predict([product(59520)], [split("HTP", 1)], CONFIG, perfs(), draws=5)
    assert long.nodes[0]["rate"] == "HTP.gflops.MUL_MAT.F16.hmx"
    assert any("59520" in n and "extrapolated" in n for n in long.notes), long.notes
    hmx = htp_perf().gflops["MUL_MAT.F16.hmx"]
    assert "extrapolated" in hmx.source and "1024" in hmx.public_source
    table = dict(capabilities.load("hexagon-v0.15.3").perf)
    table["gflops"] = {**table["gflops"], "MUL_MAT.F16.hmx.long": {"value": 3000.0, "low": 2000.0, "high": 4000.0,
                                                                    "source": "measured on a device: a test"}}
    own = predict([product(59520)], [split("HTP", 1)], CONFIG, perfs(backend_perf("HTP", table, "test")), draws=5)
    assert own.nodes[0]["rate"] == "HTP.gflops.MUL_MAT.F16.hmx.long"
    assert any("a rate of its own" in n for n in own.notes)
    with pytest.raises(InvalidOptionError, match="shape class"):
        backend_perf("HTP", {**table, "gflops": {"MUL_MAT.F16.hmx.wide": 5.0}}, "test")
