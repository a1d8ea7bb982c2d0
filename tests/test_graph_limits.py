"""Graphs ggml cannot take are refused in Python, and weights are quantized along their rows whatever their layout.

A chunked product adds three tensors a chunk: with mm_chunk=16 the tiny decoder's last products at 4 frames (7,668
src1 rows) would overflow the graph's context, where ggml aborts the process (GGML_ASSERT in ggml_new_tensor). And an
im2col kernel is stored [C_out, C_in, K]: its Q8_0 blocks run along C_in * K, not along K alone.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import TINY

import kzlab
from kzlab.audio import snr_db

F32 = TINY / "qwentts-tokenizer-f32.gguf"


def test_a_graph_over_its_tensor_budget_is_refused_not_aborted():
    code = f"""
import kzlab
m = kzlab.load_model({str(F32)!r})
d = kzlab.Decoder(m, kzlab.Lowering(mode="fast", mm_chunk=16), backend="cpu")
try:
    d.decode(kzlab.random_codes(m.hparams, 4, 0))
except kzlab.InvalidOptionError as e:
    print("REFUSED", e)
print("ALIVE", d.decode(kzlab.random_codes(m.hparams, 1, 0)).shape[0])
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "REFUSED mm_chunk=16" in p.stdout and "480 chunks" in p.stdout
    assert "ALIVE 1920" in p.stdout  # the decoder is still usable


def test_q8_0_im2col_kernels_quantize_along_their_rows():
    m = kzlab.load_model(F32)
    codes = kzlab.random_codes(m.hparams, 4, 0)
    low = kzlab.Lowering(mode="portable", conv="im2col-f32", conv_src1="data")
    with kzlab.Decoder(m, low, backend="cpu") as ref, kzlab.Decoder(m, low.replace(wtype="q8_0"), backend="cpu") as q:
        assert any(p.type == "Q8_0" for p in q.session.ensure_weights().prepared.values())
        assert snr_db(q.decode(codes), ref.decode(codes)) >= 25  # what the reference tests ask of Q8_0
