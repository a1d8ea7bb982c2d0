"""The WavTokenizer benchmark's floor (`benchmarks/wavtokenizer.py`, `products`) times the matrix products kzlab's
default decode does: its list has to stay the graph's, product for product, as the graph changes (a Winograd tile
size, a posnet block, the attention's products). Checked against the multiply-adds the profiler counts in the
graph: the MUL_MAT nodes' and, for the fused normalised convs, the products their layer records say they did."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import kzlab

ROOT = Path(__file__).resolve().parent.parent
GGUF = ROOT / "tests" / "data" / "wavtokenizer-tiny" / "wavtokenizer-tiny-f32.gguf"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_wavtokenizer", ROOT / "benchmarks" / "wavtokenizer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("frames", [20, 37])
def test_the_floor_multiplies_what_the_default_decode_multiplies(frames):
    bench = _bench()
    hp = bench.hparams(str(GGUF))
    listed = sum(m * k * n * count for _, m, k, n, count in bench.products(hp, frames))
    # the default's choices on the CPU, with the ConvNeXt blocks' products as ggml's (dwmlp's auto depends on the
    # build's libm; fused, they move into the node with the same multiply-adds)
    prof = kzlab.profile(GGUF, frames=frames, backend="cpu", sched=False, threads=1, repeat=1, warmup=0,
                         peak=False, normconv="fused", dwmlp="ops")
    mul_mat = sum(n["flops"] for n in prof.nodes if n["op"] == "MUL_MAT") // 2
    fused = sum(r["extra"]["product_macs"] for r in prof.layers if "product_macs" in r.get("extra", {}))
    assert fused > 0 and mul_mat > 0
    assert listed == mul_mat + fused
