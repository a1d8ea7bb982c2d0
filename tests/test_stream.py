"""Streaming decodes (kzlab.runtime.stream): a causal family's stream carries its state and equals the offline decode
of the same arithmetic, whatever the chunk sizes, on every backend and in both modes; a non-causal family streams in
overlapping windows and says so; bad input is refused with the stream still usable."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY, snr_db

import kzlab
from kzlab.errors import InvalidInputError, InvalidOptionError
from kzlab.runtime.rpc import rpc_server
from kzlab.runtime.stream import chunk_sizes, parse_sizes

F32 = TINY / "qwentts-tokenizer-f32.gguf"
#: chunk sizes: one frame, four, the transformer's window (72) and an irregular sequence
SIZES = (1, 4, 72, [1, 3, 7, 2, 72, 5])
#: the bound the streaming issue states, in F32: the stream reads what the offline decode reads, so only the
#: products' blocking over other row counts differs (float32 rounding, ~1e-7 relative per op, through ~40 layers)
EXACT_DB = 100.0


def random_codes(hp, frames: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, hp.semantic_codebook_size, frames)]
    rows += [rng.integers(0, hp.codebook_size, frames) for _ in range(hp.num_quantizers - 1)]
    return np.stack(rows).astype(np.int32)


def check_stream(dec, codes, sizes=SIZES, bound=EXACT_DB):
    plan, changes = dec.lowering.for_stream()
    if changes:
        # offline in the arithmetic a streaming call uses (the fast mode's unit conv direct, not Winograd's)
        with kzlab.load(F32, lowering=plan.replace(), backends=dec.resolved_backends.requested) as same:
            ref = same.decode(codes)
    else:
        ref = dec.decode(codes)
    per = dec.arch.samples_per_frame(dec.hparams)
    for k in sizes:
        s = dec.stream()
        assert s.kind == "stateful"
        pieces = []
        for n in chunk_sizes(k, codes.shape[1]):
            at = s.position
            out = s.push(codes[:, at : at + n])
            assert out.shape == (n * per,)  # a stateful stream returns every frame's audio as it is pushed
            pieces.append(out)
        assert s.flush().size == 0
        wav = np.concatenate(pieces)
        assert snr_db(wav, ref) >= bound, (k, snr_db(wav, ref))
    return s


@pytest.fixture(scope="module")
def codes40():
    from kzlab.loader import load_model

    return random_codes(load_model(F32).hparams, 40)


@pytest.mark.parametrize(
    "backend,kw",
    [
        ("cpu", {"mode": "fast"}),
        ("cpu", {"mode": "portable"}),
        ("auto", {"mode": "fast"}),  # BLAS + CPU under the scheduler
        ("auto", {"mode": "portable"}),
        ("cpu", {"mode": "portable", "conv": "ktap"}),
        ("cpu", {"mode": "portable", "conv": "im2col-f32", "conv_src1": "kernel", "conv_tile": 64}),
        ("cpu", {"mode": "portable", "convt": "direct"}),
        ("cpu", {"mode": "fast", "unitconv": "direct", "convt": "col2im"}),
    ],
)
def test_stream_equals_the_offline_decode(backend, kw, codes40):
    with kzlab.load(F32, backend=backend, threads=2, **kw) as dec:
        s = check_stream(dec, codes40)
        # the state is inspectable: every tensor with its kind, size and bytes
        recs = s.state.records()
        assert recs and s.state.nbytes == sum(r.nbytes for r in recs)
        assert {r.kind for r in recs} == {"context", "kv"}
        hp = dec.hparams
        kv = [r for r in recs if r.kind == "kv"]
        assert len(kv) == 2 * hp.num_layers and all(r.frames == hp.sliding_window - 1 for r in kv)
        assert s.state.position == codes40.shape[1]


def test_stream_over_rpc_equals_the_offline_decode(codes40):
    with rpc_server(threads=2) as srv:
        with kzlab.load(F32, backend=srv.address) as dec:
            check_stream(dec, codes40[:, :12], sizes=(1, 5))


def test_stream_with_f16_columns_is_within_their_rounding(codes40):
    """ggml_conv_1d's F16 columns (the llama.cpp preset): a call's products take ggml-cpu's F16 path where the
    offline decode's longer ones may take BLAS's, so the two differ by F16 rounding (2^-11 relative), not 100 dB."""
    with kzlab.load(F32, backend="auto", lowering=kzlab.LLAMACPP) as dec:
        check_stream(dec, codes40[:, :20], sizes=(1, 7), bound=45.0)


def test_winograd_asked_for_by_name_streams_and_says_it_is_not_exact(codes40):
    """unitconv='winograd' by name: the stream runs it too (no substitution), and says its rounding differs."""
    with kzlab.load(F32, backend="cpu", unitconv="winograd") as dec:
        s = dec.stream()
        assert not s.exact and "winograd" in s.describe() and not s.plan_changes
        wav = s.run(codes40[:, :12], 5)
        assert s.summary()["exact"] is False
        assert snr_db(wav, dec.decode(codes40[:, :12])) >= 70  # the F32 bound: Winograd's rounding, not an error
    with kzlab.load(F32, backend="cpu") as dec:
        s = dec.stream()
        assert s.exact and set(s.plan_changes) == {"unitconv"}


def test_state_is_carried_not_recomputed(codes40):
    """Pushing frames one at a time and four at a time leaves the same state (up to rounding) and position."""
    with kzlab.load(F32, backend="cpu", mode="portable") as dec:
        a, b = dec.stream(), dec.stream()
        for t in range(8):
            a.push(codes40[:, t : t + 1])
        b.push(codes40[:, :4])
        b.push(codes40[:, 4:8])
        assert a.position == b.position == 8
        for key in a.state.tensors:
            x, y = a.state[key], b.state[key]
            assert x.shape == y.shape
            assert snr_db(x, y) >= EXACT_DB or np.allclose(x, y, atol=1e-6), key


def test_bad_input_is_refused_and_the_stream_goes_on(codes40):
    with kzlab.load(F32, backend="cpu") as dec:
        s = dec.stream()
        first = s.push(codes40[:, :2])
        bad = codes40[:, 2:4].copy()
        bad[3, 1] = 10**6
        with pytest.raises(InvalidInputError, match="out of range"):
            s.push(bad)
        with pytest.raises(InvalidInputError, match="no frames"):
            s.push(codes40[:, :0])
        with pytest.raises(InvalidInputError, match="shape"):
            s.push(codes40[:4, 2:4])
        assert s.position == 2
        rest = s.push(codes40[:, 2:4])
        whole = dec.decode(codes40[:, :4])
        assert snr_db(np.concatenate([first, rest]), whole) >= 90  # the fast mode's Winograd offline
        with pytest.raises(InvalidInputError, match="left and lookahead"):
            dec.stream(lookahead=4)


def test_chunk_sizes_are_validated():
    assert chunk_sizes([1, 3], 8) == [1, 3, 1, 3]
    assert chunk_sizes(5, 12) == [5, 5, 2]
    assert parse_sizes("1,3,7") == [1, 3, 7]
    for bad in (0, [1, 0], [], True, [2.5]):
        with pytest.raises(InvalidInputError):
            chunk_sizes(bad, 4)
    with pytest.raises(InvalidInputError):
        parse_sizes("a,b")


def test_a_family_that_is_not_causal_streams_in_windows_and_says_so(tmp_path):
    from kzlab.graph.build import build_graph

    wt = tmp_path / "wt.gguf"
    from kzlab.cli import main

    assert main(["synth", "--preset", "wavtokenizer-dec-tiny", "--dtype", "f32", "-o", str(wt), "-q"]) == 0
    with kzlab.load(wt, backend="cpu") as dec:
        hp = dec.hparams
        rng = np.random.default_rng(1)
        codes = rng.integers(0, hp.codebook_size, (1, 60)).astype(np.int32)
        s = dec.stream()
        assert s.kind == "windowed" and "not causal" in s.describe()
        wav = s.run(codes, 8)
        ref = dec.decode(codes)
        assert wav.shape == ref.shape
        # the first audio waits for the lookahead: a call returns only the frames `lookahead` before the newest
        per = dec.arch.samples_per_frame(hp)
        assert s.calls[0].samples == (8 - s.lookahead) * per
        with pytest.raises(InvalidOptionError, match="not causal"):
            build_graph(dec.session.ensure_weights(), dec.lowering, hp, 4, stream=True)
