"""Backends by name, plain and scheduler modes, RPC over loopback, and every lowering option on each backend.

The decoder is causal end to end (causal convs, causal windowed attention, transposed convs trimmed on the
right), so decoding the first frames of the reference codes reproduces the first samples of the reference
waveform; the tests decode a few frames to stay fast.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FRAMES, SAMPLES, snr_db

from kzlab.errors import InvalidOptionError
from kzlab.graph.options import Lowering
from kzlab.runtime.backends import available_backends, open_backends, parse_rpc
from kzlab.runtime.rpc import rpc_server
from kzlab.runtime.session import Session

#: (lowering, SNR bound in dB vs the upstream reference); every option value appears at least once
#: (snake="fused" in FUSED: it runs on CPU backends only; the default "auto" is fused there, folded on RPC)
VARIANTS = [
    (Lowering(), 70),
    (Lowering(snake="folded", conv_tile=64), 70),
    (Lowering(conv="ktap", conv_src1="data", convt="direct", snake="raw"), 70),
    (Lowering(conv="ktap", conv_src1="kernel"), 70),
    (Lowering(conv="ktap-acc", conv_src1="data", mm_chunk=64), 70),
    (Lowering(conv="ktap-acc", conv_src1="kernel", mode="portable"), 70),
    (Lowering(conv="im2col-f32", conv_src1="data", mm_chunk=64), 70),
    (Lowering(conv="im2col-f16"), 40),
    (Lowering(wtype="f32"), 70),
    (Lowering(wtype="f16"), 40),
    # bf16 keeps 8 mantissa bits (f16 has 11): about 18 dB below f16 on this model
    (Lowering(wtype="bf16"), 30),
]
#: q8_0 requantized at load (transposed convs and the transformer's projections kept F16) measures 45 dB
Q8 = (Lowering(wtype="q8_0"), 30)
FUSED = [
    (Lowering(snake="fused"), 70),
    (Lowering(snake="fused", conv="ktap", conv_src1="data", convt="direct"), 70),
    (Lowering(snake="fused", conv="im2col-f32", conv_src1="data", conv_tile=64), 70),
    (Lowering(snake="fused", conv="im2col-f16"), 40),
]


@pytest.fixture(scope="module")
def server():
    with rpc_server(threads=1) as srv:
        yield srv
    assert srv.proc.poll() is not None  # the server is stopped on exit


def backend_spec(name: str, server) -> str | list[str]:
    return {
        "cpu": "cpu",
        "blas": "blas",
        "rpc": server.address if server else "",
        "sched-cpu-blas": ["blas", "cpu"],
        "sched-cpu-rpc": [server.address, "cpu"] if server else [],
    }[name]


def decode(model, lowering, backend, codes) -> np.ndarray:
    with Session(model, lowering, backend=backend, threads=1) as s:
        return s.run(codes.shape[1], {"codes": codes})["wav"][0]


@pytest.mark.parametrize("name", ["cpu", "blas", "rpc", "sched-cpu-blas", "sched-cpu-rpc"])
def test_every_lowering_option_on_every_backend(name, tiny, codes, ref, request):
    server = request.getfixturevalue("server") if "rpc" in name else None
    spec = backend_spec(name, server)
    failures = []
    for low, bound in VARIANTS:
        snr = snr_db(decode(tiny, low, spec, codes), ref["wav"][:SAMPLES])
        if snr < bound:
            failures.append(f"{low.label()}: {snr:.1f} dB < {bound}")
    assert not failures, f"{name}: " + "; ".join(failures)


@pytest.mark.parametrize("name", ["cpu", "blas", "sched-cpu-blas"])
def test_fused_snake_on_cpu_backends(name, tiny, codes, ref):
    failures = []
    for low, bound in FUSED:
        snr = snr_db(decode(tiny, low, backend_spec(name, None), codes), ref["wav"][:SAMPLES])
        if snr < bound:
            failures.append(f"{low.label()}: {snr:.1f} dB < {bound}")
    assert not failures, f"{name}: " + "; ".join(failures)


def test_fused_snake_is_refused_on_rpc_and_auto_falls_back(tiny, server):
    for spec in (server.address, [server.address, "cpu"]):
        with pytest.raises(InvalidOptionError, match="fused"):
            Session(tiny, Lowering(snake="fused"), backend=spec, threads=1)
        with Session(tiny, Lowering(), backend=spec, threads=1) as s:
            assert s.lowering.snake == "folded"
    with Session(tiny, Lowering(), backend="cpu", threads=1) as s:
        assert s.lowering.snake == "fused"


@pytest.mark.parametrize("name", ["cpu", "sched-cpu-rpc"])
def test_q8_0_bound(name, tiny, codes, ref, request):
    server = request.getfixturevalue("server") if "rpc" in name else None
    low, bound = Q8
    assert snr_db(decode(tiny, low, backend_spec(name, server), codes), ref["wav"][:SAMPLES]) >= bound


def test_rpc_server_decode_matches_local_cpu(tiny, codes):
    local = decode(tiny, Lowering(), "cpu", codes)
    with rpc_server(threads=1) as srv:
        remote = decode(tiny, Lowering(), srv.address, codes)
        sched = decode(tiny, Lowering(), [srv.address, "cpu"], codes)
    assert srv.proc.poll() is not None
    assert snr_db(remote, local) >= 100
    assert snr_db(sched, local) >= 100


def test_sched_rpc_with_weights_on_cpu_and_no_offload(tiny, codes, server):
    local = decode(tiny, Lowering(), "cpu", codes)
    for kw in ({"weights_on": "cpu"}, {"op_offload": False}):
        with Session(tiny, Lowering(), backend=[server.address, "cpu"], threads=1, **kw) as s:
            w = s.run(FRAMES, {"codes": codes})["wav"][0]
        assert snr_db(w, local) >= 100, kw


def test_graphs_can_alternate_under_the_scheduler(tiny, ref, server):
    """Two shapes share one scheduler: each reallocation must split the graph from its own sources."""
    with Session(tiny, Lowering(), backend=[server.address, "cpu"], threads=1) as s:
        for _ in range(2):
            for t in (FRAMES, FRAMES + 2):
                c = np.ascontiguousarray(ref["codes"][:, :t], dtype=np.int32)
                w = s.run(t, {"codes": c})["wav"][0]
                assert snr_db(w, ref["wav"][: t * 1920]) >= 70


def test_node_assignment_is_read_back(tiny, server):
    # col2im: with the fused nodes none of the tiny model's products is big enough for the BLAS backend
    with Session(tiny, Lowering(convt="col2im"), backend=["blas", "cpu"], threads=1) as s:
        bg = s.graph(FRAMES)
        names = s.backends.node_backends(bg)
        assert len(names) == bg.n_nodes
        assert set(names) == {"blas", "cpu"}
        mm = [b for b, n in zip(names, bg.nodes(), strict=True) if n.contents.name.decode().endswith(":MUL_MAT")]
        assert "blas" in mm
        assert s.backends.n_splits(bg) > 1
    with Session(tiny, Lowering(), backend=[server.address, "cpu"], threads=1) as s:
        bg = s.graph(FRAMES)
        names = s.backends.node_backends(bg)
        assert names.count(server.address) > 0.9 * len(names)  # everything next to the weights


def test_backend_names_and_errors():
    assert "cpu" in available_backends() and "blas" in available_backends()
    assert parse_rpc("rpc://127.0.0.1:50052") == ("127.0.0.1", 50052)
    for bad in ("rpc://host", "rpc://h:0", "rpc://h:70000", "tcp://h:1"):
        with pytest.raises(InvalidOptionError):
            parse_rpc(bad)
    with pytest.raises(InvalidOptionError, match="unknown backend"):
        open_backends("tpu9")
    with pytest.raises(InvalidOptionError, match="sched=False cannot run it"):
        open_backends("blas", sched=False)
    with pytest.raises(InvalidOptionError, match="twice"):
        open_backends(["cpu", "cpu"])
    with pytest.raises(InvalidOptionError, match="weights_on"):
        open_backends(["blas", "cpu"], weights_on="rpc")
    bs = open_backends("blas", threads=1)
    try:
        assert bs.use_sched and [b.name for b in bs.backends] == ["blas", "cpu"]
        assert bs.describe() == "sched[blas+cpu]"
    finally:
        bs.free()


def test_an_error_in_the_fused_kernel_is_raised_not_lost(tiny, codes, monkeypatch):
    from kzlab.errors import BackendError
    from kzlab.graph import fused

    def broken(*_a, **_k):
        raise ValueError("boom")

    with Session(tiny, Lowering(snake="fused"), backend="cpu", threads=1) as s:
        good = s.run(FRAMES, {"codes": codes})["wav"][0]
        monkeypatch.setattr(fused.nodes, "snake_block", broken)  # the name the node's callback calls
        with pytest.raises(BackendError, match="boom"):
            s.run(FRAMES, {"codes": codes})
        monkeypatch.undo()
        assert np.array_equal(s.run(FRAMES, {"codes": codes})["wav"][0], good)  # the session is still usable


def test_ktap_acc_sums_on_a_padded_copy_past_acc_s_offsets_and_says_so(tiny, codes, ref, monkeypatch):
    """ACC keeps its byte offsets in 32 bits: a conv whose output is over the builder's bound sums its taps on a
    padded copy (ktap's form), and its layer record says so; the result is the same."""
    from kzlab.graph import builder

    low = Lowering(conv="ktap-acc", mode="portable")
    with Session(tiny, low, backend="cpu", threads=1) as s:
        plain = s.run(codes.shape[1], {"codes": codes})["wav"][0]
        assert not [r for r in s.graph(codes.shape[1]).layers if "taps_summed" in r.extra]
    monkeypatch.setattr(builder, "SET_MAX_OFFSET", 4096)  # bytes: every conv of the tiny decoder is over it
    with Session(tiny, low, backend="cpu", threads=1) as s:
        bg = s.graph(codes.shape[1])
        padded = s.run(codes.shape[1], {"codes": codes})["wav"][0]
        noted = [r for r in bg.layers if "taps_summed" in r.extra]
    assert noted and all("padded copy" in r.extra["taps_summed"] for r in noted)
    assert snr_db(plain, ref["wav"][:SAMPLES]) >= 70 and snr_db(padded, ref["wav"][:SAMPLES]) >= 70
