"""The CLI commands of the core issue, run as a user would (subprocesses)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from conftest import TINY, run_cli, snr_db


def test_info_text_and_json():
    p = run_cli("info", str(TINY / "crispasr-tokenizer-f16.gguf"))
    assert "crispasr" in p.stdout and "405,181" in p.stdout
    p = run_cli("info", str(TINY / "qwentts-tokenizer-f32.gguf"), "--json")
    info = json.loads(p.stdout)
    assert info["layout"] == "qwentts" and info["hparams"]["latent_dim"] == 64
    assert info["dtypes"] == {"F32": 187} and info["file_size"] > 2_000_000


def test_decode_writes_wav_and_npy(tmp_path, ref):
    np.save(tmp_path / "codes.npy", ref["codes"])
    p = run_cli(
        "decode",
        str(TINY / "qwentts-tokenizer-f32.gguf"),
        "--codes",
        str(tmp_path / "codes.npy"),
        "-o",
        str(tmp_path / "o.wav"),
        "--npy",
        str(tmp_path / "o.npy"),
        "--threads",
        "1",
    )
    assert "T-evolution 400 -> 3200 -> 16000 -> 64000 -> 192000" in p.stdout
    wav, sr = sf.read(tmp_path / "o.wav", dtype="float32")
    assert sr == 24000 and wav.shape == (192000,)
    assert snr_db(np.load(tmp_path / "o.npy"), ref["wav"]) >= 70


def test_decode_chunked(tmp_path, ref):
    np.save(tmp_path / "long.npy", ref["codes_long"])
    run_cli(
        "decode",
        str(TINY / "qwentts-tokenizer-f32.gguf"),
        "--codes",
        str(tmp_path / "long.npy"),
        "-o",
        str(tmp_path / "o.wav"),
        "--npy",
        str(tmp_path / "o.npy"),
        "--chunked",
    )
    assert snr_db(np.load(tmp_path / "o.npy"), ref["wav_long_chunked"]) >= 70


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_convert_cli(tmp_path, outtype):
    out = tmp_path / f"c-{outtype}.gguf"
    p = run_cli("convert", str(TINY / "hf"), "-o", str(out), "--outtype", outtype)
    assert out.is_file() and "wrote" in p.stdout
    assert not list(tmp_path.glob("*.part"))


def test_synth_tiny_preset(tmp_path):
    out = tmp_path / "t.gguf"
    run_cli("synth", "--preset", "qwen3-tts-12hz-tiny", "--dtype", "f32", "-o", str(out))
    info = json.loads(run_cli("info", str(out), "--json").stdout)
    assert info["n_params"] == 405181


def test_bad_inputs_exit_cleanly(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOTAGGUF" * 10)
    p = run_cli("info", str(bad), check=False)
    assert p.returncode == 2 and "not a GGUF file" in p.stderr
    np.save(tmp_path / "c.npy", np.full((16, 5), 999, dtype=np.int32))
    p = run_cli(
        "decode",
        str(TINY / "qwentts-tokenizer-f32.gguf"),
        "--codes",
        str(tmp_path / "c.npy"),
        "-o",
        str(tmp_path / "o.wav"),
        check=False,
    )
    assert p.returncode == 2 and "out of range" in p.stderr


@pytest.mark.slow
def test_full_size_synthetic_decode(full_synth, full_ref, tmp_path):
    np.save(tmp_path / "c.npy", full_ref["codes"])
    p = run_cli("decode", str(full_synth), "--codes", str(tmp_path / "c.npy"), "-o", str(tmp_path / "o.wav"))
    assert "T-evolution 124 -> 992 -> 4960 -> 19840 -> 59520 samples" in p.stdout
    assert "channels    1536 -> 768 -> 384 -> 192 -> 96 -> 1" in p.stdout
    wav, sr = sf.read(tmp_path / "o.wav", dtype="float32")
    assert wav.shape == (59520,) and sr == 24000
    assert 0.01 < float(np.std(wav)) < 1.0


def test_builtin_names_work_wherever_a_file_does(tmp_path, monkeypatch):
    """`kzlab info tiny` / `wavtokenizer-tiny` (package data) and `kzlab.load('tiny')`; a file of that name in
    the working directory wins over the built-in."""
    import kzlab

    p = run_cli("info", "tiny")
    assert "family      qwen3-tts-12hz" in p.stdout and "qwen3-tts-12hz-tiny-f32.gguf" in p.stdout
    p = run_cli("info", "wavtokenizer-tiny")
    assert "family      wavtokenizer-dec" in p.stdout
    with kzlab.load("tiny", backend="cpu", threads=1) as dec:
        assert dec.model.family == "qwen3-tts-12hz"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").write_bytes(b"not a gguf")
    with pytest.raises(kzlab.KzlabError):
        kzlab.load_model("tiny")


def test_generated_builtin_is_built_on_first_use(tmp_path, monkeypatch):
    """A generated built-in (`wavtokenizer-synthetic`) is written into $KZLAB_CACHE on first use, then reused."""
    import kzlab
    from kzlab.formats.named import builtin_path

    monkeypatch.setenv("KZLAB_CACHE", str(tmp_path))
    want = builtin_path("wavtokenizer-synthetic")
    assert want.parent == tmp_path and not want.exists()
    m = kzlab.load_model("wavtokenizer-synthetic")
    assert m.path == want and want.is_file() and m.hparams.dim == 768
    mtime = want.stat().st_mtime_ns
    assert kzlab.load_model("wavtokenizer-synthetic").path == want and want.stat().st_mtime_ns == mtime


def test_help_names_no_single_family():
    p = run_cli("--help")
    assert "Qwen3-TTS 12 Hz decoders" not in p.stdout
    p = run_cli("synth", "--help")
    assert "--family" in p.stdout and "wavtokenizer-dec" in p.stdout
