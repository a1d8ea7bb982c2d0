"""Shared fixtures: the reference data in tests/data and decoders built from it once per session."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
TINY = DATA / "qwen3-tts-12hz-tiny"
FULL = DATA / "qwen3-tts-12hz-full"


def snr_db(out: np.ndarray, ref: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (out - ref)^2), the bound the issues state."""
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    err = np.sum((out - ref) ** 2)
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(ref**2) / err))


@pytest.fixture(scope="session")
def ref():
    return dict(np.load(TINY / "reference.npz"))


#: frames the backend and lowering tests decode (the decoder is causal: they match the reference's first samples)
FRAMES = 6
SAMPLES = FRAMES * 1920


@pytest.fixture(scope="session")
def tiny():
    """The tiny F32 decoder, loaded once."""
    from kzlab.loader import load_model

    return load_model(TINY / "qwentts-tokenizer-f32.gguf")


@pytest.fixture(scope="session")
def codes(ref):
    """The reference codes' first FRAMES frames, as the graph's int32 input."""
    return np.ascontiguousarray(ref["codes"][:, :FRAMES], dtype=np.int32)


@pytest.fixture(scope="session")
def full_ref():
    return dict(np.load(FULL / "reference.npz"))


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kzlab")


@pytest.fixture(scope="session")
def converted(workdir):
    """`kzlab convert` of the tiny HF checkpoint, per outtype."""
    from kzlab.app.convert import convert

    out = {}
    for t in ("f32", "f16", "q8_0"):
        out[t] = convert(TINY / "hf", workdir / f"tiny-{t}.gguf", outtype=t)
    return out


@pytest.fixture(scope="session")
def qwen3tts_cpp_files(workdir):
    """Files in the qwen3-tts.cpp / koboldcpp layout, written from hf/ (see helpers)."""
    from helpers import write_qwen3tts_cpp

    return {
        "f16": write_qwen3tts_cpp(TINY / "hf", workdir / "q3cpp-f16.gguf", "f16", usage=True),
        "q8_0": write_qwen3tts_cpp(TINY / "hf", workdir / "q3cpp-q8_0.gguf", "q8_0", usage=False),
        "f32": write_qwen3tts_cpp(TINY / "hf", workdir / "q3cpp-f32.gguf", "f32", usage=True),
    }


@pytest.fixture(scope="session")
def full_synth(workdir):
    """The full-size synthetic decoder (F16), shared by the slow tests."""
    from kzlab.formats.synth import synth

    return synth(workdir / "full-f16.gguf", preset="qwen3-tts-12hz", dtype="f16", seed=0)


def run_cli(*args: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `python -m kzlab.cli ...` in a subprocess (a crash there cannot take the test run down)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    p = subprocess.run(
        [sys.executable, "-m", "kzlab.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    if check and p.returncode != 0:
        raise AssertionError(f"kzlab {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture(autouse=True)
def _quiet_hparam_warnings():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*metadata says.*")
        yield


@pytest.fixture
def isolated_cache(tmp_path_factory, monkeypatch):
    """A module's tests share one profile cache of their own (never the user's)."""
    monkeypatch.setenv("KZLAB_CACHE", str(tmp_path_factory.getbasetemp() / "kzlab-cache"))


def truth_draws(draws, values: dict[str, float]):
    """One draw: every parameter at its stated value but those given (a synthetic truth to calibrate on)."""
    from kzlab.analysis.predict.draws import Draws

    theta = np.array([[values.get(n, draws.params[n].value) for n in draws.names]])
    return Draws(draws.names, theta, 0, draws.params)


def ask_whatif(model, configs: list[str], **kw):
    """`kzlab.whatif` on the tiny decoder at 4 frames, one thread, seeded (the what-if tests' common question)."""
    import kzlab

    kw = {"frames": 4, "cpu_baseline_ms": 200.0, "draws": 400, "seed": 1, "threads": 1, **kw}
    return kzlab.whatif(model, configs, **kw)


def stage_snrs(dec, ref: dict, skip: tuple[str, ...] = ("codes",), every: bool = False) -> dict[str, float]:
    """Decode `ref`'s codes with every stage kept: the SNR in dB of each stage `ref` holds (but `skip`) against it.
    `every`: each of those stages must be in the decode (else only the ones it has are compared)."""
    from kzlab.audio import snr_db as snr

    out = dec.decode(ref["codes"], intermediates=True)
    got = {**out.stages, "wav": out.wav}
    names = [k for k in ref if k not in skip]
    if every:
        assert set(names) <= set(got), sorted(set(names) - set(got))
    return {k: snr(got[k], ref[k]) for k in names if k in got}


def stages_below(dec, ref: dict, bound: float, must: tuple[str, ...] = ("wav",)) -> dict[str, float]:
    """The stages (of those `ref` holds) whose SNR against `ref` is below `bound` dB, rounded, after checking that
    `must` are among those compared."""
    snr = stage_snrs(dec, ref)
    assert set(must) <= set(snr), sorted(set(must) - set(snr))
    return {k: round(v, 1) for k, v in snr.items() if v < bound}
