"""`kzlab convert`: any decoder kzlab can read (a Hugging Face checkpoint directory, or a GGUF of any
dialect) written as a GGUF of the requested type, in its family's own layout (qwentts.cpp's for the
Qwen3-TTS 12 Hz decoder, llama.cpp's for WavTokenizer)."""

from __future__ import annotations

from pathlib import Path

from kzlab.arch import arch_of
from kzlab.formats.writer import write_gguf
from kzlab.loader import load_model
from kzlab.progress import Progress, ProgressFn


def convert(
    src: str | Path,
    out: str | Path,
    outtype: str = "f32",
    layout: str | Path | None = None,
    progress: ProgressFn | bool | None = None,
) -> Path:
    """Convert `src` to a GGUF at `out` (written atomically). Encoder tensors are left out. `progress` reports
    the tensors written (None: a bar unless kzlab is quiet; False: none; or fn(done, total))."""
    model = load_model(src, layout=layout)
    order = [r.name for r in arch_of(model.hparams).roles(model.hparams) if r.name in model.weights]
    tensors = [(role, model.weights[role].f32) for role in order]
    with Progress(len(tensors), f"writing {Path(out).name}", progress, unit="tensor") as bar:
        return write_gguf(
            out,
            model.hparams,
            tensors,
            outtype=outtype,
            extra_metadata={"kzlab.source": str(Path(src).name), "kzlab.source_layout": model.layout},
            progress=lambda _role: bar.step(),
        )
