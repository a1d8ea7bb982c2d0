"""A WavTokenizer GGUF of another size, made with llama.cpp's own converter and not kept in the repo, decodes with no
edit and matches its PyTorch reference at every stage: the sizes come from the file, never from an assumption.

Two ways in, both needing files outside the repository:

- ``KZLAB_WT_SIZED=dir[:dir...]``: folders that each hold ``<name>-f32.gguf`` and ``reference.npz`` in the shared
  fixtures' format (made by ``shared/tools/wavtokenizer/make_wavtokenizer_fixture.py`` at any size);
- or the generator itself: ``KZLAB_WT_LLAMA`` names a folder with llama.cpp's ``tools/tts/convert_pt_to_hf.py``,
  ``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/`` (commit cb295bf5), and a Python with torch and the
  ``outetts==0.4.4`` wheel is found (this one, or ``KZLAB_WT_PYTHON``); the tool then writes a file of 128
  channels, 4 ConvNeXt blocks, a 1024 x 64 codebook into a temporary folder.

Without either the test is skipped and says which input is missing. The bound is the default lowering's F32 bound,
70 dB at every stage: the float32 kernels differ from PyTorch's by summation order only (about 110-130 dB measured).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kzlab
from kzlab.audio import snr_db

TOOL = Path(__file__).resolve().parents[1].parent / "shared" / "tools" / "wavtokenizer" / "make_wavtokenizer_fixture.py"
#: a size unlike the tiny fixture's and the shipped model's in every dimension the file carries
MID = dict(features=64, vocab=1024, dim=128, ff=384, layers=4, groups=32, seed=1, frames=150)
BOUND_F32_DB = 70.0
#: s, the generator's run (llama.cpp's converter and the PyTorch reference) and the whole test: hang guards, above
#: pytest-timeout's per-test default (900 s), which a busy 2-core machine can reach here
GENERATOR_HANG_S = 3600
#: s, the probe for torch and outetts (an import of torch): a hang guard, not a speed check
PROBE_HANG_S = 600


def _outetts_dir(python: str) -> Path | None:
    """The wav_tokenizer folder of an installed outetts wheel, found without importing the package (its __init__
    pulls in the TTS front end)."""
    code = ("import importlib.util,sys; s=importlib.util.find_spec('outetts'); "
            "sys.stdout.write(s.submodule_search_locations[0] if s else '')")
    try:
        out = subprocess.run([python, "-c", "import torch; " + code], capture_output=True, text=True,
                             timeout=PROBE_HANG_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout:
        return None
    d = Path(out.stdout) / "wav_tokenizer"
    return d if d.is_dir() else None


def _made_here(tmp: Path) -> list[Path]:
    llama = os.environ.get("KZLAB_WT_LLAMA")
    python = os.environ.get("KZLAB_WT_PYTHON", sys.executable)
    if not llama:
        pytest.skip("no WavTokenizer file of another size: set KZLAB_WT_SIZED, or KZLAB_WT_LLAMA (llama.cpp's "
                    "converter at cb295bf5) with a Python that has torch and outetts==0.4.4")
    if not (Path(llama) / "tools" / "tts" / "convert_pt_to_hf.py").is_file():
        pytest.skip(f"KZLAB_WT_LLAMA={llama} holds no tools/tts/convert_pt_to_hf.py")
    if not TOOL.is_file():
        pytest.skip(f"the fixture generator is not at {TOOL}")
    outetts = _outetts_dir(python)
    if outetts is None:
        pytest.skip(f"{python} has no torch or no outetts (pip install 'kzlab[bench-wavtokenizer]')")
    out = tmp / "wavtokenizer-mid"
    cmd = [python, str(TOOL), "--role", "holdout", "--name", "wavtokenizer-mid", "--outtypes", "f32",
           "--out", str(out), "--outetts", str(outetts), "--llama", llama, "--work", str(tmp / "work"),
           "--llama-commit", "cb295bf59663cd3577389315636772f4060bd1f5"]
    for k, v in MID.items():
        cmd += [f"--{k}", str(v)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=GENERATOR_HANG_S)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return [out]


def _folders(tmp: Path) -> list[Path]:
    given = os.environ.get("KZLAB_WT_SIZED")
    if given:
        return [Path(p) for p in given.split(os.pathsep) if p]
    return _made_here(tmp)


@pytest.mark.slow
@pytest.mark.timeout(2 * GENERATOR_HANG_S)
def test_a_file_of_another_size_decodes_with_no_edits(tmp_path):
    for folder in _folders(tmp_path):
        ggufs = sorted(folder.glob("*-f32.gguf"))
        assert ggufs and (folder / "reference.npz").is_file(), f"{folder}: no *-f32.gguf with a reference.npz"
        ref = dict(np.load(folder / "reference.npz"))
        with kzlab.load(ggufs[0], backend="cpu", threads=2, wtype="f32") as dec:
            hp = dec.model.hparams
            # the sizes the file says, checked against the reference's own shapes
            assert (hp.features, ref["codes"].shape[1]) == (ref["embd"].shape[0], ref["embd"].shape[1])
            assert hp.dim == ref["backbone"].shape[0]
            assert hp.num_convnext == sum(1 for k in ref if k.startswith("convnext."))
            out = dec.decode(ref["codes"], intermediates=True)
        got = {**out.stages, "wav": out.wav}
        names = [k for k in ref if k not in ("codes", "posnet")]
        snr = {k: snr_db(got[k], ref[k]) for k in names}
        low = {k: round(v, 1) for k, v in snr.items() if v < BOUND_F32_DB}
        assert not low, f"{ggufs[0].name}: stages under {BOUND_F32_DB} dB: {low}"
