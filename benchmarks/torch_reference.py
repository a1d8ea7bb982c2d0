"""Upstream PyTorch reference for the Qwen3-TTS-Tokenizer-12Hz decoder.

Loads the decoder from the model code of the PyPI package ``qwen-tts`` 0.1.1 (Apache-2.0), so that
benchmarks and numerical checks can compare against the original implementation. Only the package's
``qwen_tts/core/tokenizer_12hz`` modules are imported: its top-level ``__init__`` pulls in heavy,
unrelated dependencies (gradio, librosa, onnxruntime, ...), so the package is never installed.

Requirements: ``torch``, ``transformers==4.57.3``, ``safetensors`` and ``numpy``, plus the
``qwen-tts`` 0.1.1 wheel, which :func:`find_wheel` locates or downloads.

Command line::

    python benchmarks/torch_reference.py HF_DIR REFERENCE_NPZ [--threads 2] [--runs 5] [--chunked]

``HF_DIR`` holds ``config.json`` and ``model.safetensors``; ``REFERENCE_NPZ`` holds ``codes``
(``[16, T]``) and the upstream waveform ``wav`` for them. The script times the decoder on those codes
and on 375 frames (30 s of audio at 12.5 Hz) of random codes (optionally also through the upstream
``chunked_decode``), and checks the waveform against the reference.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from safetensors import safe_open

QWEN_TTS_VERSION = "0.1.1"
WHEEL_ENV_VAR = "KZLAB_QWEN_TTS_WHEEL"
DEFAULT_WHEEL_DIR = Path("/tmp/qwen-tts-wheel")
UPSTREAM_PACKAGE = "qwen_tts/core/tokenizer_12hz/"
FRAME_RATE_HZ = 12.5

_imported_from: Path | None = None


def _wheel_in(directory: Path) -> Path | None:
    """Return the qwen-tts wheel in ``directory``, if there is one."""
    if not directory.is_dir():
        return None
    wheels = sorted(directory.glob(f"qwen_tts-{QWEN_TTS_VERSION}-*.whl"))
    return wheels[0] if wheels else None


def find_wheel() -> Path:
    """Locate the qwen-tts wheel, downloading it when it is nowhere on disk.

    Looks, in order, at the path in the ``KZLAB_QWEN_TTS_WHEEL`` environment variable (a wheel file
    or a directory holding one), at ``/tmp/qwen-tts-wheel``, and finally runs
    ``pip download qwen-tts==0.1.1 --no-deps`` into a fresh temporary directory.
    """
    env_value = os.environ.get(WHEEL_ENV_VAR)
    if env_value:
        env_path = Path(env_value)
        if env_path.is_file():
            return env_path
        found = _wheel_in(env_path)
        if found is None:
            raise FileNotFoundError(f"{WHEEL_ENV_VAR}={env_value} names no qwen-tts {QWEN_TTS_VERSION} wheel")
        return found

    found = _wheel_in(DEFAULT_WHEEL_DIR)
    if found is not None:
        return found

    target = Path(tempfile.mkdtemp(prefix="qwen_tts_wheel_"))
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"qwen-tts=={QWEN_TTS_VERSION}", "--no-deps", "-d", str(target)],
        check=True,
    )
    found = _wheel_in(target)
    if found is None:
        raise FileNotFoundError(f"pip download left no qwen-tts wheel in {target}")
    return found


def import_upstream(wheel: Path) -> Path:
    """Make the upstream ``qwen_tts.core.tokenizer_12hz`` package importable from ``wheel``.

    Extracts only that subpackage into a temporary directory (removed at exit), adds empty
    ``__init__.py`` files for the parent packages so that the package's own ``__init__`` is never
    run, and prepends the directory to ``sys.path``. Calling it again is a no-op.

    Returns:
        The directory that was added to ``sys.path``.
    """
    global _imported_from
    if _imported_from is not None:
        return _imported_from

    root = Path(tempfile.mkdtemp(prefix="qwen_tts_src_"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(UPSTREAM_PACKAGE):
                archive.extract(name, root)
    for package in ("qwen_tts", "qwen_tts/core"):
        (root / package / "__init__.py").touch()
    sys.path.insert(0, str(root))
    _imported_from = root
    return root


def load_upstream_decoder(hf_dir: Path, threads: int) -> torch.nn.Module:
    """Build the upstream decoder and load the checkpoint's decoder weights into it.

    Args:
        hf_dir: directory with ``config.json`` and ``model.safetensors`` (upstream tensor names).
        threads: number of intra-op threads for PyTorch (``torch.set_num_threads``).

    Returns:
        ``Qwen3TTSTokenizerV2Model(config).decoder`` in eval mode, using eager attention.
    """
    torch.set_num_threads(threads)
    import_upstream(find_wheel())
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )

    config = Qwen3TTSTokenizerV2Config(**json.loads((hf_dir / "config.json").read_text()))
    config.decoder_config._attn_implementation = "eager"
    decoder = Qwen3TTSTokenizerV2Model(config).decoder

    prefix = "decoder."
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(hf_dir / "model.safetensors"), framework="pt") as weights:
        names = weights.keys()
        for key in names:
            if key.startswith(prefix):
                state[key[len(prefix) :]] = weights.get_tensor(key)
    decoder.load_state_dict(state, strict=True)
    return decoder.eval()


def decode(
    decoder: torch.nn.Module,
    codes: npt.NDArray[np.integer],
    chunked: bool = False,
) -> npt.NDArray[np.float32]:
    """Decode codes to a waveform with the upstream decoder.

    Args:
        decoder: the module returned by :func:`load_upstream_decoder`.
        codes: integer codes of shape ``[16, T]`` (quantizers, frames).
        chunked: use the upstream ``chunked_decode`` (chunks of 300 frames with 25 frames of left
            context) instead of a single forward pass.

    Returns:
        The waveform, shape ``[T * 1920]``, float32 in ``[-1, 1]``.
    """
    if codes.ndim != 2:
        raise ValueError(f"expected codes of shape [16, T], got {codes.shape}")
    batch = torch.from_numpy(np.ascontiguousarray(codes, dtype=np.int64))[None]
    with torch.inference_mode():
        wav = decoder.chunked_decode(batch) if chunked else decoder(batch)
    return wav[0, 0].numpy().astype(np.float32, copy=False)


def _time_decode(
    decoder: torch.nn.Module,
    codes: npt.NDArray[np.integer],
    runs: int,
    warmup: int,
    chunked: bool = False,
) -> list[float]:
    """Wall-clock seconds of ``runs`` decodes, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        decode(decoder, codes, chunked)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        decode(decoder, codes, chunked)
        times.append(time.perf_counter() - start)
    return times


def _peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    """Time the upstream decoder and check it against a reference waveform."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hf_dir", type=Path, help="directory with config.json and model.safetensors")
    parser.add_argument("reference", type=Path, help="npz with 'codes' [16, T] and the upstream 'wav'")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch intra-op threads (default 2)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per case (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before timing (default 1)")
    parser.add_argument("--long-frames", type=int, default=375, help="frames of random codes (default 375)")
    parser.add_argument("--seed", type=int, default=0, help="numpy seed for the random codes (default 0)")
    parser.add_argument("--chunked", action="store_true", help="also time the random codes with chunked_decode")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    decoder = load_upstream_decoder(args.hf_dir, args.threads)
    load_seconds = time.perf_counter() - start

    reference = np.load(args.reference)
    ref_codes = reference["codes"]
    wav = decode(decoder, ref_codes)
    max_abs_diff = float(np.max(np.abs(wav.astype(np.float64) - reference["wav"])))

    codebook_size = int(decoder.config.codebook_size)
    rng = np.random.default_rng(args.seed)
    long_codes = rng.integers(0, codebook_size, size=(ref_codes.shape[0], args.long_frames), dtype=np.int64)

    cases = [
        (f"{ref_codes.shape[1]} frames", ref_codes, False),
        (f"{args.long_frames} frames", long_codes, False),
    ]
    if args.chunked:
        cases.append((f"{args.long_frames} frames, chunked", long_codes, True))
    print(f"torch {torch.__version__}, {args.threads} threads, load {load_seconds:.2f} s")
    print(f"median of {args.runs} runs after {args.warmup} warm-up run(s), seconds:")
    print(f"{'case':<24}{'median':>9}{'min':>9}{'max':>9}{'audio':>9}{'RTF':>8}")
    for label, codes, chunked in cases:
        times = _time_decode(decoder, codes, args.runs, args.warmup, chunked)
        audio_seconds = codes.shape[1] / FRAME_RATE_HZ
        median = statistics.median(times)
        print(
            f"{label:<24}{median:>9.3f}{min(times):>9.3f}{max(times):>9.3f}"
            f"{audio_seconds:>9.2f}{median / audio_seconds:>8.3f}"
        )
    print(f"max |wav - reference| ({ref_codes.shape[1]} frames): {max_abs_diff:.3e}")
    print(f"peak RSS: {_peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
