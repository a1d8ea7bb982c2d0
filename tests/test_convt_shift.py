"""The transposed convs' `shift` lowering: each slice of stride taps is a product over the input frames it reads,
added in place (ACC) shifted by its frames; past ACC's 32-bit byte offsets the padded form (one product over a
zero-padded input, its slices added as views) takes over. Both compute the same, offline and in a stream (where
the frames before a call are the previous call's, not zeros)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import snr_db

import kzlab
from kzlab.graph.builder import GraphBuilder


def padded_only(self, x, wname, cout, stride, kernel, lead):
    return self._convt_shift_padded(self.as_cl(x), wname, cout, stride, kernel // stride, lead)


@pytest.mark.parametrize("model", ["mimi-tiny", "pockettts-tiny"])
def test_in_place_and_padded_shift_compute_the_same(model, monkeypatch):
    outs = {}
    for form in ("acc", "padded"):
        if form == "padded":
            monkeypatch.setattr(GraphBuilder, "_convt_shift", padded_only)
        with kzlab.load(model, threads=2) as dec:
            assert dec.lowering.convt == "shift"
            rng = np.random.default_rng(3)
            hp = dec.model.hparams
            x = (rng.integers(0, hp.codebook_size, (hp.num_quantizers, 9)).astype(np.int32) if dec.takes_codes
                 else rng.standard_normal((32, 9)).astype(np.float32))
            outs[form] = (dec.decode(x), dec.stream().run(x, [1, 3, 5]))
    # float32 products either way; the slices' products only group their rows differently (within the BLAS's
    # rounding of one product); PocketTTS's F16 convs round their activations to F16 (see test_attention.py)
    bound = 100 if model == "mimi-tiny" else 60
    for i in range(2):
        assert snr_db(outs["acc"][i], outs["padded"][i]) >= bound
    assert snr_db(outs["acc"][1], outs["acc"][0]) >= bound  # the stream against its offline decode
