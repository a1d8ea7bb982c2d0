"""The known-answer decoder: speech through the full-size vocoder comes back out (real compute, F16)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import snr_db

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech-24k.wav"


@pytest.fixture(scope="module")
def known_answer(tmp_path_factory):
    from kzlab.formats.known_answer import synth_known_answer

    return synth_known_answer(tmp_path_factory.mktemp("ka") / "ka-f16.gguf", dtype="f16", seed=0)


def test_latent_layout_is_a_permutation():
    """Every sample of a frame lands in its own latent channel, and nothing else is set."""
    from kzlab.formats.known_answer import _sample_channel_map, audio_to_latent
    from kzlab.model.hparams import HParams

    hp = HParams()
    perm = _sample_channel_map(hp)
    assert sorted(perm.tolist()) == list(range(480))
    wav = np.linspace(-0.5, 0.5, 1920 * 2, dtype=np.float32)
    lat = audio_to_latent(wav, hp)
    assert lat.shape == (1024, 8)  # 2 frames of 1920 samples = 8 latent frames of 480
    assert np.all(lat[480:] == 0)
    assert np.array_equal(np.sort(lat[:480].ravel()), np.sort(wav))


def test_audio_to_latent_refuses_bad_input():
    from kzlab.errors import InvalidInputError
    from kzlab.formats.known_answer import audio_to_latent

    with pytest.raises(InvalidInputError):
        audio_to_latent(np.full(100, 1.5, np.float32))
    with pytest.raises(InvalidInputError):
        audio_to_latent(np.zeros((2, 100), np.float32))


@pytest.mark.slow
def test_speech_round_trip_full_size_f16(known_answer):
    """~2 s of espeak-ng speech -> latent -> the full-size graph -> the same samples, SNR >= 40 dB."""
    import kzlab
    from kzlab.audio import read_wav

    wav, sr = read_wav(SPEECH)
    wav = wav[sr // 4 : sr // 4 + 2 * sr]  # 2 s, starting inside the speech
    assert np.abs(wav).max() > 0.1, "the sample should contain speech"
    with kzlab.load(known_answer) as dec:
        assert dec.hparams.decoder_dim == 1536 and dec.hparams.latent_dim == 1024
        lat = kzlab.audio_to_latent(wav, dec.hparams)
        out = dec.decode_from("latent", lat)
    assert out.shape[0] == lat.shape[1] * 480 >= wav.size
    snr = snr_db(out[: wav.size], wav)
    print(f"known-answer SNR (full size, F16): {snr:.1f} dB")
    assert snr >= 40.0
