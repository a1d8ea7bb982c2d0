"""Streaming, measured: one decoder streamed at several chunk sizes (`stream_sweep`), and the same from a
workbench `RunSpec` (`execute_stream`, what the Workbench's Stream tab runs).

Each size is timed on a stream whose graphs were built before its first push (`Stream.prepare`; a windowed stream,
whose graphs are the decoder's own per window shape, after one untimed pass of the same sizes), so the time to
first audio is the first call's compute, not graph building. Each size's audio is compared with the offline decode
of the same codes (`snr_db`). A stateful stream's call may compute some layers otherwise than the decoder's plan
(`Stream.plan_changes`, e.g. the fast mode's unit conv direct instead of Winograd's): then the reference is the
offline decode in the streaming call's arithmetic (its plan, decoded on the same backends), which measures the
streaming itself, and `snr_offline_db` is against this decoder's own offline decode. Results are plain records.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.audio import snr_db
from kzlab.codes import validate_codes
from kzlab.errors import InvalidInputError, InvalidOptionError

#: the chunk sizes a sweep takes by default (code frames per call)
DEFAULT_SIZES = (1, 4, 16)


@dataclass
class StreamSweep:
    """A decoder streamed at several chunk sizes: one row per size, what ran, and the state it carries.

    Row columns: `size` (frames per call), `calls`, `frames`, `audio_s`, `first_audio_ms` (the first call that
    returned audio, codes to audio, graphs built before), `call_ms_median`, `call_ms_max`, `chunk_audio_ms` (the
    audio one call of `size` frames returns), `rtf` (compute over audio duration; < 1 keeps up), `snr_db` (against
    the offline decode in the stream's arithmetic, see the module docstring), `snr_offline_db` (against this
    decoder's own offline decode), `state_bytes`, `repeat` (timed passes; the times are their medians)."""

    rows: list[dict] = field(default_factory=list)
    kind: str = ""  # "stateful" or "windowed" (Stream.kind)
    #: whether the stream computes what the offline decode computes, up to float32 rounding (Stream.exact)
    exact: bool = False
    describe: str = ""  # Stream.describe() of the last stream
    model: str = ""
    family: str = ""
    backend_label: str = ""
    mode: str = ""
    lowering_label: str = ""
    #: lowering choices a streaming call makes otherwise than the decoder's plan, each with why
    plan_changes: dict[str, str] = field(default_factory=dict)
    #: the carried state (a stateful stream): each tensor as a record (key, kind, channels, frames, order, nbytes)
    state: list[dict] = field(default_factory=list)
    state_bytes: int = 0
    frames: int = 0  # code frames streamed at each size
    sample_rate: int = 0
    frame_ms: float = 0.0  # one code frame's audio
    left: int = 0  # a windowed stream's frames before and after each call's
    lookahead: int = 0
    reference: str = ""  # what snr_db is measured against
    #: how the graphs were made ready before timing
    prepared: str = ""
    threads: int | None = None
    label: str = ""
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(xs: Sequence[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(statistics.median(xs)) if xs else None


def stream_sweep(
    decoder,
    codes,
    sizes: int | Sequence[int] = DEFAULT_SIZES,
    repeat: int = 1,
    left: int | None = None,
    lookahead: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    check: Callable[[], None] | None = None,
) -> StreamSweep:
    """Stream `codes` [n_codebooks, T] through `decoder` (a `kzlab.Decoder`) in calls of each size of `sizes`, each
    size `repeat` times on a fresh stream with its graphs built before timing; returns a `StreamSweep` (plain rows).
    `progress(i, n, text)` before each timed pass; `check()` between passes (a canceller's)."""
    from kzlab.runtime.stream import check_sizes, offline_in_stream_arithmetic

    sizes = sorted(set(check_sizes(sizes)))
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise InvalidOptionError(f"repeat={repeat!r}: expected an integer >= 1")
    probe = decoder.stream(left, lookahead)
    hp, arch = decoder.hparams, decoder.arch
    if hp.num_quantizers == 1 and np.ndim(codes) == 1:  # [T] for a one-codebook family, as decode takes
        codes = np.asarray(codes)[None, :]
    c = validate_codes(codes, hp)
    sr = decoder.sample_rate
    frame_ms = 1e3 * arch.samples_per_frame(hp) / sr
    out = StreamSweep(
        kind=probe.kind, exact=probe.exact, describe=probe.describe(),
        model=str(decoder.model.path), family=arch.name,
        backend_label=decoder.backend_label, mode=decoder.mode,
        lowering_label=decoder.lowering.label(getattr(arch, "not_applicable", {})),
        plan_changes=dict(probe.plan_changes), frames=int(c.shape[1]), sample_rate=sr, frame_ms=frame_ms,
        left=probe.left, lookahead=probe.lookahead, threads=decoder.resolved_backends.threads,
    )
    if probe.kind == "stateful":
        out.prepared = "each size's graph built and allocated before timing (Stream.prepare before the first push)"
    else:
        out.prepared = ("graphs built before timing by one untimed pass of each size (a windowed stream's graphs "
                        "are the decoder's own, one per window shape, cached)")
    ref, changes = offline_in_stream_arithmetic(decoder, c) if probe.kind == "stateful" else (decoder.decode(c), {})
    out.reference = "the offline decode"
    if changes:
        plan = decoder.lowering.for_stream()[0]
        made = ", ".join(f"{k}={getattr(plan, k)}" for k in changes)
        out.reference += f" in the streaming call's arithmetic ({made})"
    offline = decoder.decode(c) if changes else ref
    total = len(sizes) * repeat
    last = None
    for i, k in enumerate(sizes):
        runs = []
        for r in range(repeat):
            if check:
                check()
            if progress:
                progress(i * repeat + r, total, f"streaming {c.shape[1]} frames in calls of {k}")
            s = decoder.stream(left, lookahead)
            if s.kind == "stateful":
                s.prepare(k, int(c.shape[0]) if decoder.takes_codes else None)  # the codes' count's graphs
            elif r == 0:
                decoder.stream(left, lookahead).run(c, k)  # builds every window shape's graph, untimed
            t0 = time.perf_counter()
            wav = s.run(c, k)
            runs.append((s.summary(), time.perf_counter() - t0, wav))
            last = s
        summ = [x[0] for x in runs]
        wav = runs[-1][2]
        row = {
            "size": k,
            "calls": summ[-1]["calls"],
            "frames": summ[-1]["frames"],
            "audio_s": summ[-1]["audio_s"],
            "first_audio_ms": _median([x["first_audio_ms"] for x in summ]),
            "call_ms_median": _median([x["call_ms_median"] for x in summ]),
            "call_ms_max": _median([x["call_ms_max"] for x in summ]),
            "chunk_audio_ms": k * frame_ms,
            "rtf": _median([x["rtf"] for x in summ]),
            "wall_s": _median([x[1] for x in runs]),
            "snr_db": snr_db(wav, ref) if wav.shape == ref.shape else None,
            "snr_offline_db": snr_db(wav, offline) if wav.shape == offline.shape else None,
            "state_bytes": summ[-1]["state_bytes"],
            "repeat": repeat,
        }
        out.rows.append(row)
    if last is not None:
        out.describe = last.describe()
        out.state = [asdict(r) for r in last.state.records()]
        out.state_bytes = int(last.state.nbytes)
    if progress:
        progress(total, total, "done")
    return out


def execute_stream(
    spec,
    sizes: int | Sequence[int] = DEFAULT_SIZES,
    progress: Callable[[float, int, str], None] | None = None,
    canceller=None,
) -> StreamSweep:
    """A workbench `RunSpec`'s decoder, backends, lowering and input (its codes), streamed at `sizes`
    (`stream_sweep`, `spec.repeat` passes each); never raises for kzlab errors (they land in `error`)."""
    from kzlab.app.builtins import resolve_model
    from kzlab.app.runner import Canceller, input_of, record_error
    from kzlab.loader import load_model
    from kzlab.runtime.decoder import Decoder

    canc = canceller or Canceller()
    rec = StreamSweep(label=spec.label or "stream")
    dec = None
    try:
        canc.check()
        if progress:
            progress(0, 1, "loading the decoder")
        path = resolve_model(spec.model)
        model = load_model(path, hparams=dict(spec.hparams) or None)
        dec = Decoder(model, spec.lowering_obj(), spec.backend_spec())
        canc.session = dec.session
        kind, x, _ = input_of(spec, dec)
        if kind != "codes":
            raise InvalidInputError(f"a stream decodes codes; input {spec.input!r} gives a {kind}")
        res = stream_sweep(dec, x, sizes, repeat=max(1, int(spec.repeat)), progress=progress, check=canc.check)
        res.label = spec.label or f"{Path(path).stem} {res.backend_label} {res.mode}"
        rec = res
    except Exception as e:
        record_error(rec, e)
    finally:
        canc.session = None
        if dec is not None:
            dec.close()
    return rec


__all__ = ["DEFAULT_SIZES", "StreamSweep", "execute_stream", "stream_sweep"]
