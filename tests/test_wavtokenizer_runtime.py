"""WavTokenizer through every backend kzlab runs and every analysis: decode on cpu, blas and rpc (a loopback
server), with the scheduler and without, in F32, F16 and Q8_0 (weights converted at load), each stage against
the PyTorch reference within the family's bounds; chunked decode; `kzlab profile` (per node, per stage, GFLOP by
block, T-evolution, roofline) and `kzlab simulate --predict` on every Hexagon profile, each refusal with its
reason.

The bounds (F32 >= 70 dB, F16 >= 40, Q8_0 >= 25 at every stage) are those of tests/test_wavtokenizer.py: the
arithmetic is the same on every backend here (ggml's CPU kernels behind the scheduler, BLAS's products, the RPC
server's CPU backend), only the order of sums differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

import kzlab
from kzlab.analysis.placement.capabilities import names as profile_names
from kzlab.arch import arch_of
from kzlab.audio import snr_db
from kzlab.errors import InvalidInputError
from kzlab.runtime.backends import available_backends
from kzlab.runtime.rpc import rpc_server

DATA = Path(__file__).parent / "data" / "wavtokenizer-tiny"
GGUF = DATA / "wavtokenizer-tiny-f32.gguf"
BOUNDS = {"f32": 70.0, "f16": 40.0, "q8_0": 25.0}
HEXAGON = [n for n in profile_names() if n.startswith("hexagon")]


@pytest.fixture(scope="module")
def ref():
    return dict(np.load(DATA / "reference.npz"))


@pytest.fixture(scope="module")
def server():
    with rpc_server(threads=1) as srv:
        yield srv


def _low_stages(dec, ref, bound: float) -> tuple[dict[str, float], dict[str, float]]:
    out = dec.decode(ref["codes"], intermediates=True)
    got = {**out.stages, "wav": out.wav}
    names = [k for k in ref if k not in ("codes", "posnet")]
    assert set(names) <= set(got), sorted(set(names) - set(got))
    snr = {k: snr_db(got[k], ref[k]) for k in names}
    return snr, {k: round(v, 1) for k, v in snr.items() if v < bound}


#: (backend, sched) as kzlab.load takes them; the RPC address is filled in from the server
SETUPS = [("cpu", False), ("cpu", True), ("blas", True), ("rpc", False), (["rpc", "cpu"], True)]


@pytest.mark.parametrize("wtype", list(BOUNDS))
@pytest.mark.parametrize("setup", SETUPS, ids=["cpu", "sched-cpu", "sched-blas+cpu", "rpc", "sched-rpc+cpu"])
def test_every_backend_and_weight_type_matches_the_reference(ref, server, setup, wtype):
    backend, sched = setup
    if backend == "blas" and "blas" not in available_backends():
        pytest.skip("this ggml build has no BLAS backend")
    backend = [server.address if b == "rpc" else b for b in backend] if isinstance(backend, list) else (
        server.address if backend == "rpc" else backend
    )
    with kzlab.load(GGUF, backend=backend, sched=sched, threads=2, wtype=wtype) as dec:
        assert dec.resolved_backends.sched == sched and dec.mode == "portable"
        snr, low = _low_stages(dec, ref, BOUNDS[wtype])
    assert not low, f"{dec.backend_label} {wtype}: stages under {BOUNDS[wtype]} dB: {low} (all: {snr})"


def test_chunked_decode_slices_left_and_right_context_right():
    """Every chunk through the whole decoder (split=False): with a context that covers the whole sequence on both
    sides every chunk sees what the whole decode sees, so the stitched result is the whole decode (up to rounding:
    each chunk is its own graph)."""
    codes = kzlab.random_codes(kzlab.load_model(GGUF).hparams, 130, seed=5)
    with kzlab.load(GGUF, backend="cpu", threads=2) as dec:
        whole = dec.decode(codes)
        kw = dict(chunked=True, chunk_size=40, left_context=130, progress=False, split=False)
        full = dec.decode(codes, right_context=130, **kw)
        left = dec.decode(codes, **kw)
        assert dec.arch.right_context == 0
    assert full.shape == left.shape == whole.shape == (130 * 320,)
    assert snr_db(full, whole) >= 70.0
    # without a lookahead the posnet's attention of an early chunk misses later frames: not the whole decode
    assert snr_db(left, whole) < 40.0
    with kzlab.load(GGUF, backend="cpu", threads=1) as dec, pytest.raises(InvalidInputError, match="right_context"):
        dec.decode(codes, chunked=True, right_context=-1)


def test_chunked_decode_at_the_family_default_joins_exactly():
    """The family splits its chunked decode after the posnet (Arch.chunk_split): the posnet runs whole, the local
    rest in chunks with the context it reaches, so chunked equals whole up to rounding (each chunk is its own
    graph: sums may run in another order on another thread count), at the default chunking and in small chunks."""
    hp = kzlab.load_model(GGUF).hparams
    stop, start, reach = arch_of(hp).chunk_split(hp)
    assert reach == 3 * hp.num_convnext + 2 and start in [s.name for s in arch_of(hp).stages(hp)]
    codes = kzlab.random_codes(hp, 700, seed=1)
    with kzlab.load(GGUF, backend="cpu", threads=2) as dec:
        whole = dec.decode(codes)
        default = dec.decode(codes, chunked=True, progress=False)
        small = dec.decode(codes, chunked=True, chunk_size=23, left_context=0, progress=False)
        windowed = dec.decode(codes, chunked=True, split=False, progress=False)
        with pytest.raises(InvalidInputError, match="split"):
            dec.decode(codes, chunked=True, split="yes")
    assert snr_db(default, whole) >= 70.0 and snr_db(small, whole) >= 70.0
    # every chunk through the whole decoder: its posnet sees only the chunk, an approximation (docstring: ~3 dB)
    assert snr_db(windowed, whole) < 20.0


def test_chunked_decode_over_rpc_joins_exactly(server):
    codes = kzlab.random_codes(kzlab.load_model(GGUF).hparams, 200, seed=2)
    with kzlab.load(GGUF, backend="cpu", threads=1) as local:
        whole = local.decode(codes)
    with kzlab.load(GGUF, backend=server.address, threads=1) as dec:
        chunked = dec.decode(codes, chunked=True, chunk_size=64, progress=False)
    assert snr_db(chunked, whole) >= 70.0


def test_profile_per_node_stage_block_evolution_and_roofline(tmp_path, ref):
    out, codes = tmp_path / "p.json", tmp_path / "codes.npy"
    np.save(codes, ref["codes"][0, :20])  # [T]: one codebook
    p = run_cli("profile", str(GGUF), "--codes", str(codes), "--repeat", "1", "--threads", "1", "--json", str(out))
    assert "by block (wavtokenizer-dec): " in p.stdout and "BigVGAN" not in p.stdout, p.stdout
    assert "% peak" in p.stdout and "MUL_MAT" in p.stdout
    d = json.loads(out.read_text())
    prof = kzlab.profile(GGUF, frames=20, threads=1, repeat=1, peak=False, dwmlp="fused")
    hp = kzlab.load_model(GGUF).hparams
    stages = list(prof.config["stage_groups"])
    assert stages == [s.name for s in arch_of(hp).stages(hp)]
    # every stage in model order, and every node in one (views and copies named after their source included)
    assert [r["stage"] for r in prof.by_stage()] == stages and all(n["stage"] for n in prof.nodes)
    groups = {r["group"]: r for r in prof.by_group()}
    assert list(groups) == list(dict.fromkeys(prof.config["stage_groups"][s] for s in stages))
    # GFLOP by block: each ConvNeXt block's two products (2 * T * dim * hidden each), the head's, the posnet's
    T = 20
    mlp = 2 * (2 * T * hp.dim * hp.intermediate_size)
    conv_group = prof.config["stage_groups"][stages[-3]]
    assert groups[conv_group]["flops"] >= hp.num_convnext * mlp
    assert sum(r["flops"] for r in groups.values()) == sum(n["flops"] for n in prof.nodes)
    # the fast mode's fused nodes: one per ConvNeXt block, the first conv's and two per posnet ResnetBlock, a
    # GroupNorm statistics node per posnet norm; everything else ggml ops
    resnets = hp.posnet_kinds.count("resnet")
    fused = [n["fused"] for n in prof.nodes if n["fused"]]
    assert sorted(fused) == sorted(["convnext"] * hp.num_convnext + ["normalised conv"] * (1 + 2 * resnets)
                                   + ["group norm statistics"] * (len(hp.posnet_kinds) + resnets))
    # T-evolution: every stage keeps T frames; the head widens to n_fft + 2
    evo = {r["stage"]: r for r in prof.evolution}
    assert evo[stages[-1]]["c_out"] == hp.n_fft + 2 and all(r["t_out"] == T for r in evo.values())
    assert d["peak_gflops"] > 0 and d["config"]["family"] == "wavtokenizer-dec"
    figs = [kzlab.plots.roofline([prof]), kzlab.plots.t_evolution(prof), kzlab.plots.gflop_breakdown(prof)]
    assert all(f.axes for f in figs)


@pytest.mark.parametrize("profile", HEXAGON)
def test_simulate_predict_on_every_hexagon_profile(profile):
    """Every node the device refuses says why; the prediction and the memory check come out for this family."""
    pl = kzlab.simulate(GGUF, profile, frames=8)
    cpu = [n for n in pl.nodes if n.backend == "CPU" and n.cause != "4.vsrc"]
    assert cpu, "the device takes everything: no refusal to explain"
    unexplained = [n.name for n in cpu if not any(n.refused.values()) and not n.reason]
    assert not unexplained
    refused = {n.op: n.refused for n in cpu if n.refused}
    assert refused and all(any(v for v in r.values()) for r in refused.values())
    stages = {s["stage"] for s in pl.stages}
    assert stages == {n.stage for n in pl.nodes if n.stage}
    p = run_cli("simulate", str(GGUF), "--profile", profile, "--frames", "8", "--predict")
    assert "predicted total" in p.stdout and "memory:" in p.stdout and "fits in" in p.stdout, p.stdout


def test_a_whole_sequence_part_over_the_budget_says_how_to_window_it():
    codes = kzlab.random_codes(kzlab.load_model(GGUF).hparams, 1000, seed=3)
    with kzlab.load(GGUF, backend="cpu", threads=1, memory_budget=1_000_000) as dec:
        with pytest.raises(kzlab.ResourceError, match=r"see the whole sequence.*split=False"):
            dec.decode(codes, chunked=True, progress=False)
        wav = dec.decode(codes, chunked=True, split=False, chunk_size=50, left_context=10, progress=False)
    assert wav.shape == (1000 * 320,)
