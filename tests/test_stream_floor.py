"""The streaming benchmark's products' floor (`benchmarks/products_floor.py`): the products of one K-frame call of a
stream, back to back. It has to run the call's own products, no fewer (a floor that skipped some would flatter every
call measured against it) and no others, and running it between a stream's calls must leave the stream's audio as
it was (it computes in the call's own compute buffer)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

import kzlab

ROOT = Path(__file__).resolve().parent.parent


def _floor_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("products_floor", ROOT / "benchmarks" / "products_floor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("k", [1, 3])
def test_the_floor_runs_the_calls_products(k):
    pf = _floor_module()
    path = TINY / "qwentts-tokenizer-f32.gguf"
    with kzlab.load(path, threads=2, mode="fast") as dec:
        codes = kzlab.random_codes(dec.hparams, 4 * k, seed=0)
        s = dec.stream()
        s.prepare([k])
        floor = pf.ProductsFloor(dec, k, codes)
        try:
            runs = floor.time_ms(3)
            assert len(runs) == 3 and all(t > 0 for t in runs)
            nodes = dec.session.graph(k, stream=True).nodes()
            ops = [pf._op(n) for n in nodes]
            assert floor.n_nodes == ops.count("MUL_MAT") > 0
            by_name = {name: (kind, flops) for name, kind, flops in floor.per_node}
            # every fused residual unit and transposed conv is replayed; the snakes and joins compute no product
            fused = [n.contents.name.decode() for n, op in zip(nodes, ops, strict=True) if op == "CUSTOM"]
            units = [n for n in fused if ".res." in n]
            convts = [n for n in fused if n.endswith("convt:CUSTOM")]
            assert units and convts and floor.n_fused == len(units) + len(convts)
            assert {n for n, (kind, _) in by_name.items() if kind == "fused"} == set(units) | set(convts)
            # a direct unit's products: conv1's K taps and conv2, 2 T C^2 (K + 1) FLOPs over the call's T frames
            prof = kzlab.profile(path, stream=k, threads=2, repeat=1, warmup=0, peak=False, mode="fast")
            seen = 0
            for n in prof.nodes:
                if n["name"] in units:
                    c, t = n["ne"][0], n["ne"][1]
                    assert by_name[n["name"]][1] == 2 * t * c * c * 8
                    seen += 1
            assert seen == len(units)
            # the graph's products, node for node in the graph's order (names repeat: a layer's two products)
            assert [(name, f) for name, kind, f in floor.per_node if kind == "ggml"] == [
                (n["name"], n["flops"]) for n in prof.nodes if n["op"] == "MUL_MAT"]
            assert floor.flops == sum(f for _, _, f in floor.per_node)
        finally:
            floor.close()


def test_a_stream_with_the_floor_run_between_its_calls_decodes_as_without():
    pf = _floor_module()
    with kzlab.load(TINY / "qwentts-tokenizer-f32.gguf", threads=2, mode="fast") as dec:
        codes = kzlab.random_codes(dec.hparams, 12, seed=1)
        plain = dec.stream().run(codes, 3)
        s = dec.stream()
        s.prepare([3])
        floor = pf.ProductsFloor(dec, 3, codes)
        try:
            out = []
            for at in range(0, 12, 3):
                out.append(s.push(codes[:, at : at + 3]))
                floor.time_ms(1)
        finally:
            floor.close()
    assert np.array_equal(np.concatenate(out), plain)
