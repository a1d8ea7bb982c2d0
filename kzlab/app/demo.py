"""The demo (what `make demo` and `kzlab demo` run): build the built-in decoders if missing, decode, profile,
and write a self-contained HTML report.

The runs are kept small so a fresh machine finishes in a few minutes: the full-size synthetic decoder on a
few frames of random codes with two conv lowerings (an A/B comparison of like with like: both in the portable
mode, ggml ops only, which is what a device port runs; run A also with the Hexagon what-if), and the
known-answer decoder turning a few seconds of the shipped speech sample back into audio.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kzlab.app.builtins import SPEECH, ensure_builtin
from kzlab.app.runner import RunRecord, RunSpec, execute
from kzlab.progress import Progress, ProgressFn

#: conv_src1="data" (mul_mat(kernel, columns)) is the form whose src1 rows grow with T: the Hexagon what-if
#: of run A shows which of those MUL_MATs v0.15.2's 1024-row limit refuses
LOWERING_A = {"mode": "portable", "conv": "im2col-f32", "conv_src1": "data"}
LOWERING_B = {"mode": "portable", "conv": "ktap", "conv_src1": "data"}


def demo_specs(frames: int = 6, seconds: float = 3.0, threads: int | None = None) -> list[RunSpec]:
    """The demo's three runs."""
    frames_speech = max(1, round(seconds * 12.5))
    return [
        RunSpec(model="synthetic", input="random", frames=frames, threads=threads, lowering=dict(LOWERING_A),
                repeat=2, hexagon_profile="hexagon-v0.15.2",
                label="A: synthetic, portable, conv im2col-f32, src1=data"),
        RunSpec(model="synthetic", input="random", frames=frames, threads=threads, lowering=dict(LOWERING_B),
                repeat=2, label="B: synthetic, portable, conv ktap, src1=data"),
        RunSpec(model="known-answer", input="audio", audio_path=str(SPEECH), frames=frames_speech, threads=threads,
                profile=False, label="known-answer: speech through the full-size vocoder"),
    ]


def run_demo(
    output: str | Path = "demo-report.html",
    frames: int = 6,
    seconds: float = 3.0,
    threads: int | None = None,
    say: Callable[[str], None] = lambda _text: None,
    progress: ProgressFn | bool | None = None,
) -> tuple[Path, list[RunRecord]]:
    """Build the decoders, run the three demo runs, write the report; (report path, run records)."""
    from kzlab.report import write_report

    for name in ("synthetic", "known-answer"):
        say(f"decoder {name}: {ensure_builtin(name, progress=say)}")
    recs = []
    specs = demo_specs(frames, seconds, threads)
    with Progress(len(specs), "demo runs", progress, unit="run") as bar:
        for spec in specs:
            say(spec.label)
            rec = execute(spec, lambda k, n, text: say(f"  [{k:g}/{n}] {text}"))
            if rec.error:
                say(f"  error: {rec.error}")
            for note in rec.notes:
                say(f"  note: {note.splitlines()[0]}")
            recs.append(rec)
            bar.step()
    return write_report(recs, output, "kzlab demo"), recs
