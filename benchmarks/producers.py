"""Every producer's file of both families against upstream PyTorch: the waveform SNR, by the types each file holds.

The files are the ones the tests use (tests/data, see its PROVENANCE.md: each written by its project's own
converter, except qwen3-tts.cpp's, written by tests/helpers.py as its converter does), decoded with kzlab's
default settings, 2 threads. The bound each row is held to follows from the types the file really holds:
F32 >= 70 dB, F16 and BF16 >= 40 dB, Q8_0 >= 25 dB, the lowest type of its matrices deciding (llama.cpp's
"F32" mmproj keeps its conv kernels in F16, so its bound is the F16 one). For a BF16 file the table also gives
the floor its own values set: the F32 file's weights rounded to BF16 and decoded in F32 arithmetic.

``--full DIR`` adds llama.cpp's full-size mmproj files (DIR/mmproj-qwen3tts-full-{f32,f16,bf16,q8_0}.gguf, made by
its converter from the full-size random checkpoint) against ``--full-reference``.

    python benchmarks/producers.py [--full /work/bench/llamacpp-full/out --full-reference REF.npz]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "data"
TINY_REF = DATA / "qwen3-tts-12hz-tiny" / "reference.npz"
WT_REF = DATA / "wavtokenizer-tiny" / "reference.npz"
BOUNDS = {"F32": 70.0, "F16": 40.0, "BF16": 40.0, "Q8_0": 25.0}
RANK = ["Q8_0", "BF16", "F16", "F32"]  # lowest first


def matrix_types(model) -> list[str]:
    """The types of the file's matrices (2-D and up), lowest first: the first decides its bound."""
    types = {w.type for w in model.weights.values() if len(w.shape) >= 2}
    return [t for t in RANK if t in types]


def bf16_floor(f32_path: Path, bf16_path: Path, ref: dict, hparams: dict | None) -> float:
    """SNR of the BF16 file's own values decoded in F32 arithmetic (the F32 file's weights rounded as it is)."""
    from helpers import bf16_values_in_f32  # tests/helpers.py, on the path from rows()

    import kzlab
    from kzlab.audio import snr_db
    from kzlab.graph.options import Lowering
    from kzlab.runtime.backends import BackendSpec
    from kzlab.runtime.decoder import Decoder

    f32, bf16 = (kzlab.load_model(p, hparams=hparams) for p in (f32_path, bf16_path))
    model = bf16_values_in_f32(f32, bf16)
    spec = BackendSpec.from_kw(None, backend="auto", threads=2)
    with Decoder(model, Lowering(), spec, None) as d:
        return snr_db(d.decode(ref["codes"]), ref["wav"])


def rows(args, tmp: Path) -> list[tuple]:
    """(family, producer, file, reference, hparams, options)"""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from helpers import write_qwen3tts_cpp

    q = "Qwen3-TTS 12 Hz"
    wt = "WavTokenizer"
    heads = {"num_heads": 4}
    out = [
        (
            q,
            "qwentts.cpp convert.py (a8a7716)",
            DATA / "qwen3-tts-12hz-tiny/qwentts-tokenizer-f32.gguf",
            TINY_REF,
            None,
            {},
        ),
        (
            q,
            "CrispASR converter (72d3c38)",
            DATA / "qwen3-tts-12hz-tiny/crispasr-tokenizer-f16.gguf",
            TINY_REF,
            None,
            {},
        ),
    ]
    for t in ("f32", "f16", "q8_0"):
        p = write_qwen3tts_cpp(DATA / "qwen3-tts-12hz-tiny/hf", tmp / f"q3cpp-{t}.gguf", t, usage=t != "q8_0")
        out.append((q, "qwen3-tts.cpp layout (tests/helpers.py, as its converter)", p, TINY_REF, None, {}))
    for t in ("f32", "f16", "bf16", "q8_0"):
        out.append(
            (
                q,
                "llama.cpp --mmproj (0c1e5709)",
                DATA / f"llamacpp-mmproj/mmproj-qwen3tts-tiny-{t}.gguf",
                TINY_REF,
                heads,
                {},
            )
        )
    out.append(
        (
            q,
            "llama.cpp --mmproj (0c1e5709)",
            DATA / "llamacpp-mmproj/mmproj-qwen3tts-tiny-bf16.gguf",
            TINY_REF,
            heads,
            {"wtype": "f32"},
        )
    )
    for t in ("f32", "q8_0"):
        out.append(
            (
                q,
                "audio.cpp audiocpp_gguf (f8fb0c19)",
                DATA / f"audiocpp-qwen3tts/audiocpp-qwen3tts-tiny-{t}.gguf",
                TINY_REF,
                None,
                {},
            )
        )
        out.append(
            (
                q,
                "codec.cpp convert-to-gguf.py (c5ef02b1)",
                DATA / f"codeccpp-qwen3tts/codeccpp-qwen3tts-tokenizer-tiny-{t}.gguf",
                TINY_REF,
                None,
                {},
            )
        )
    out.append(
        (
            wt,
            "llama.cpp convert_hf_to_gguf.py",
            DATA / "wavtokenizer-tiny/wavtokenizer-tiny-f32.gguf",
            WT_REF,
            None,
            {},
        )
    )
    cc = DATA / "codeccpp-wavtokenizer/codeccpp-wavtokenizer-tiny-f32.gguf"
    out.append((wt, "codec.cpp convert-to-gguf.py (c5ef02b1)", cc, WT_REF, None, {}))
    out.append(
        (
            wt,
            "codec.cpp convert-to-gguf.py (c5ef02b1), 16 groups",
            cc,
            DATA / "codeccpp-wavtokenizer/reference-g16.npz",
            {"group_norm_groups": 16},
            {},
        )
    )
    mimi, mref = "Mimi (kyutai/mimi)", DATA / "mimi-tiny/reference.npz"
    out.append((mimi, "transformers 4.57.3 save_pretrained", DATA / "mimi-tiny/hf", mref, None, {}))
    for t in ("f32", "f16", "q8_0"):
        out.append((mimi, "codec.cpp convert-to-gguf.py (c5ef02b1)",
                    DATA / f"codeccpp-mimi/codeccpp-mimi-tiny-{t}.gguf", mref, None, {}))
    pocket, pref = "Mimi (PocketTTS, latents)", DATA / "pockettts-tiny/reference.npz"
    for t in ("f32", "f16", "q8_0"):
        out.append((pocket, "llama.cpp --mmproj (0c1e5709)", DATA / f"pockettts-tiny/mmproj-pockettts-tiny-{t}.gguf",
                    pref, None, {}))
    out.append((pocket, "CrispASR converter (72d3c389)", DATA / "pockettts-tiny/crispasr-pockettts-tiny-f16.gguf",
                pref, None, {}))
    if args.full:
        for t in ("f32", "f16", "bf16", "q8_0"):
            out.append(
                (
                    q + " full size",
                    "llama.cpp --mmproj (0c1e5709)",
                    Path(args.full) / f"mmproj-qwen3tts-full-{t}.gguf",
                    Path(args.full_reference),
                    None,
                    {},
                )
            )
        out.append(
            (
                q + " full size",
                "llama.cpp --mmproj (0c1e5709)",
                Path(args.full) / "mmproj-qwen3tts-full-bf16.gguf",
                Path(args.full_reference),
                None,
                {"wtype": "f32"},
            )
        )
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", default="", help="folder of llama.cpp's full-size mmproj files")
    p.add_argument("--full-reference", default="", help="the full-size checkpoint's reference.npz")
    args = p.parse_args(argv)

    import kzlab
    from kzlab.audio import snr_db
    from kzlab.graph.options import Lowering
    from kzlab.runtime.backends import BackendSpec
    from kzlab.runtime.decoder import Decoder

    print("| family | producer | file | types of its matrices | kzlab options | bound dB | wav SNR dB | met |")
    print("|---|---|---|---|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for family, producer, path, refp, hp, opts in rows(args, Path(tmp)):
            ref = dict(np.load(refp))
            m = kzlab.load_model(path, hparams=hp)
            types = matrix_types(m)
            spec = BackendSpec.from_kw(None, backend="auto", threads=2)
            with Decoder(m, Lowering().replace(**opts), spec, None) as d:  # the Model read once
                # codes, or the latents of a decoder whose first stage takes them
                snr = snr_db(d.decode(ref["codes"] if "codes" in ref else ref["latents"]), ref["wav"])
            bound = BOUNDS[types[0]]
            extra = ""
            if types[0] == "BF16":
                f32 = Path(str(path).replace("bf16", "f32"))
                floor = bf16_floor(f32, Path(path), ref, hp)
                extra = f" (its values in F32 arithmetic: {floor:.1f})"
            given = ", ".join(f"{k}={v}" for k, v in {**(hp or {}), **opts}.items()) or "default"
            mix = "/".join(reversed(types))
            print(
                f"| {family} | {producer} | `{Path(path).name}` | {mix} | {given} | {bound:.0f} | {snr:.1f}{extra} | "
                f"{'yes' if snr >= bound else 'no'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
