"""Decoding as the codes arrive: `Decoder.stream()`.

A causal family (`Arch.causal`: every layer reads only the past) streams with its state carried: each call is
one graph of the call's frames (built once per chunk size and reused) whose carried state is explicit graph
inputs and outputs (`kzlab.graph.builder.Carry`): each causal conv's left context, each transposed conv's
overlapping input frames, each attention layer's keys and values over the window's other positions, and the
stream's position (RoPE and the mask). Zeros before the first call are what the offline decode's causal padding
reads, so the streamed audio is the offline decode's, up to float32 rounding, whatever the chunk sizes.

A family whose layers also read the future (WavTokenizer: 'same' convs, attention over every frame) cannot be
streamed exactly. There the same API decodes overlapping windows: each call decodes the frames it can finish
with `lookahead` frames after them and `left` frames before them, and keeps the middle; `flush()` finishes the
rest. `Stream.kind` says which of the two a stream does, and `describe()` says it in words.

Codes with fewer codebooks than the decoder's, where the family decodes the first n (kzlab.codes), stream as
they decode: each call runs the graph built for n. A stream keeps the count of its first push
(`codebooks_used`) and refuses another, so that its audio is one decode's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from kzlab.codes import codebook_range, validate_codes
from kzlab.errors import InvalidInputError


@dataclass
class StreamCall:
    """One call of a stream: what went in and came out, and how long it took (wall, from codes to audio)."""

    position: int  # code frames pushed before this call
    frames: int  # code frames this call decoded (a windowed stream: the frames it finished)
    samples: int  # audio samples it returned
    seconds: float


@dataclass
class StateRecord:
    """One tensor of a stateful stream's carried state, as a record (`StreamState.records`)."""

    key: str
    kind: str  # "context" (a layer's input frames) or "kv" (an attention layer's keys or values)
    channels: int
    frames: int
    order: str  # how the bytes are laid out: "[frames, C]" (channels-last) or "[C, frames]", "[frames, heads, D]"
    nbytes: int


@dataclass
class StreamState:
    """What a stateful stream carries from call to call: each slot's tensor (numpy, its graph tensor's bytes in
    ggml's order) and the stream's position, with records to inspect it (`records()`, `nbytes`)."""

    position: int = 0
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    slots: dict[str, StateRecord] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.slots.values())

    def records(self) -> list[StateRecord]:
        return list(self.slots.values())

    def __getitem__(self, key: str) -> np.ndarray:
        """One slot's tensor in torch order: a context [C, frames], a cache [frames, heads, D]."""
        rec, a = self.slots[key], self.tensors.get(key)
        if a is None:
            raise KeyError(f"state {key!r} has not been computed yet (it is zeros before the first call)")
        return a.T if rec.order == "[frames, C]" else a


class Stream:
    """A stream of one decoder: `push(codes)` -> the audio those frames complete, `flush()` -> the rest.

    `kind`: "stateful" (a causal family: exact against the offline decode) or "windowed" (the others: overlapping
    windows, an approximation whose accuracy the family states). `calls` records every call."""

    def __init__(self, decoder, left: int | None = None, lookahead: int | None = None):
        self.decoder = decoder
        self.hparams = decoder.hparams
        arch = decoder.arch
        self.kind = "stateful" if getattr(arch, "causal", False) else "windowed"
        self.samples_per_frame = arch.samples_per_frame(self.hparams)
        self.calls: list[StreamCall] = []
        self.state = StreamState()
        #: lowering choices a streaming call makes otherwise than the decoder's plan, each with why
        #: (`LoweringPlan.for_stream`); a windowed stream runs the decoder's own graphs
        self.plan_changes: dict[str, str] = {}
        #: whether the stream computes what the offline decode computes (up to float32 rounding), and why not
        self.exact = self.kind == "stateful"
        self.inexact_why = "" if self.exact else "the family is not causal: overlapping windows"
        if self.kind == "stateful":
            if left is not None or lookahead is not None:
                raise InvalidInputError(
                    f"the {arch.name} family streams with its state carried: left and lookahead do not apply"
                )
            self.left, self.lookahead = 0, 0
            plan, self.plan_changes = decoder.lowering.for_stream()
            if plan.winograd_unit:
                self.exact = False
                self.inexact_why = ("unitconv='winograd' was asked for: a call's Winograd groups fall elsewhere than "
                                    "the offline decode's and round differently (87.7 dB against it at full size)")
            elif low_precision_products(decoder, plan):
                self.exact = False
                self.inexact_why = (
                    "not guaranteed: some products read F16, BF16 or Q8_0 weights, and which of ggml's kernels "
                    "computes such a product, and so how its activations are rounded and its sums ordered, depends "
                    "on its row count (the BLAS backend takes 32 rows or more, ggml-blas.cpp @ eced84c8 416-421; "
                    "ggml-cpu's tinyBLAS 2 or more, llamafile/sgemm.cpp @ eced84c8 3706-3709); a call's products "
                    "have other row counts than the offline decode's. Measured against the offline decode: from "
                    "bit-identical to 75 dB on the tiny F16 test decoders; with wtype='f32' the stream is exact")
        else:
            d_left, d_ahead = getattr(arch, "stream_context", (arch.left_context, arch.right_context))
            self.left = d_left if left is None else left
            self.lookahead = d_ahead if lookahead is None else lookahead
            for name, v in (("left", self.left), ("lookahead", self.lookahead)):
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise InvalidInputError(f"{name} must be an integer >= 0; got {v!r}")
        #: the codes' codebook count, fixed by the first push (None before it, and for a decoder of latents)
        self.codebooks_used: int | None = None
        self._codes: list[np.ndarray] = []  # a windowed stream's frames still needed
        self._buffer_start = 0  # the stream position of the buffer's first frame
        self._emitted = 0  # frames whose audio was returned
        self._pushed = 0

    @property
    def position(self) -> int:
        """Code frames pushed so far."""
        return self._pushed

    def describe(self) -> str:
        arch = self.decoder.arch
        if self.kind == "stateful":
            changes = "".join(f"; {k}: {v}" for k, v in self.plan_changes.items())
            exact = ("exact against the offline decode of the same arithmetic" if self.exact
                     else f"not exact: {self.inexact_why}")
            return (f"stateful: the {arch.label}'s state carried from call to call ({len(self.state.slots)} tensors, "
                    f"{self.state.nbytes / 1e6:.2f} MB once the first call has run), {exact}{changes}")
        note = getattr(arch, "stream_note", "")
        return (f"windowed: the {arch.label} is not causal; each call decodes its frames with {self.left} frames "
                f"before them and {self.lookahead} after (a lookahead: audio comes {self.lookahead} frames late)"
                + (f"; {note}" if note else ""))

    # ---- pushing codes ----------------------------------------------------------------------------------------
    def _validate(self, codes) -> np.ndarray:
        """The frames pushed, validated as the decoder's first stage takes them (codes, or latents)."""
        hp = self.hparams
        if getattr(hp, "num_quantizers", 0) == 1 and np.ndim(codes) == 1:
            codes = np.asarray(codes)[None, :]
        c = validate_codes(codes, hp)
        if self.decoder.takes_codes:
            n = int(c.shape[0])
            if self.codebooks_used is not None and n != self.codebooks_used:
                raise InvalidInputError(
                    f"this stream decodes {self.codebooks_used} codebooks (its first push had them); got {n}: "
                    "start a new stream (Decoder.stream()) for another count"
                )
            self.codebooks_used = n
        return c

    def push(self, codes) -> np.ndarray:
        """Codes [n_codebooks, K] (K >= 1 frames) -> float32 audio: K frames' worth from a stateful stream; from a
        windowed one the frames it can finish now (those `lookahead` frames before the newest)."""
        c = self._validate(codes)
        t0 = time.perf_counter()
        if self.kind == "stateful":
            wav = self._push_stateful(c)
            frames = c.shape[1]
        else:
            wav, frames = self._push_windowed(c, final=False)
        self.calls.append(StreamCall(self._pushed, frames, int(wav.size), time.perf_counter() - t0))
        self._pushed += c.shape[1]
        return wav

    def flush(self) -> np.ndarray:
        """The audio of the frames pushed but not yet returned (a windowed stream's lookahead; a stateful stream
        returns every frame as it is pushed, so nothing)."""
        if self.kind == "stateful" or self._emitted == self._pushed:
            return np.zeros(0, np.float32)
        t0 = time.perf_counter()
        wav, frames = self._push_windowed(None, final=True)
        self.calls.append(StreamCall(self._pushed, frames, int(wav.size), time.perf_counter() - t0))
        return wav

    def _push_stateful(self, c: np.ndarray) -> np.ndarray:
        frames = c.shape[1]
        wav, new, meta = self.decoder.run_stream_call(frames, {"codes": c}, self.state.tensors, self._pushed)
        self.state.tensors = new
        self.state.position = self._pushed + frames
        if not self.state.slots:
            self.state.slots = {k: state_record(k, m, new[k]) for k, m in meta.items()}
        return np.asarray(wav)[0]

    def _push_windowed(self, c: np.ndarray | None, final: bool) -> tuple[np.ndarray, int]:
        if c is not None:
            self._codes.append(c)
        pushed = self._pushed + (c.shape[1] if c is not None else 0)
        end = pushed if final else pushed - self.lookahead  # the frames this call can finish
        if end <= self._emitted:
            return np.zeros(0, np.float32), 0
        buf = np.concatenate(self._codes, axis=1) if len(self._codes) > 1 else self._codes[0]
        lo = max(0, self._emitted - self.left)
        hi = pushed  # everything after `end` is lookahead
        part = buf[:, lo - self._buffer_start : hi - self._buffer_start]
        wav = self.decoder.decode(part)
        up = self.samples_per_frame
        out = wav[(self._emitted - lo) * up : (end - lo) * up]
        done = end - self._emitted
        self._emitted = end
        keep = max(0, self._emitted - self.left)  # drop the frames no later window reads
        self._codes = [buf[:, keep - self._buffer_start :]]
        self._buffer_start = keep
        return out, done

    def prepare(self, sizes, codebooks: int | None = None) -> None:
        """Build (and allocate) the graphs of these chunk sizes before the first codes arrive, as a player warms up
        before it streams: the first push then pays no graph building (a stateful stream; the state is left as it
        is). `codebooks`: the count the codes will have (default: the stream's, once pushed, else the decoder's
        own); each count has its graph. A windowed stream's graphs are the decoder's own and are built on first
        use."""
        if self.kind != "stateful":
            return
        channels = self.decoder.arch.stage_input_shape(self.hparams, self.decoder.stages()[0], 1)[0]
        if self.decoder.takes_codes:
            channels = codebooks if codebooks is not None else (self.codebooks_used or channels)
            lo, hi = codebook_range(self.hparams)
            if isinstance(channels, bool) or not isinstance(channels, (int, np.integer)) or not lo <= channels <= hi:
                raise InvalidInputError(f"codebooks={codebooks!r}: this decoder decodes {lo} to {hi} codebooks")
        for k in sorted(set(check_sizes(sizes))):
            zeros = np.zeros((channels, k), np.int32 if self.decoder.takes_codes else np.float32)
            self.decoder.run_stream_call(k, {"codes": zeros}, {}, 0)

    def summary(self) -> dict:
        """The stream's figures so far: calls, frames, time to first audio (the first call that returned audio, from
        its codes to its audio), call times, the real-time factor (compute over audio duration) and the state."""
        sr = self.decoder.sample_rate
        calls = [c for c in self.calls if c.samples]
        total = sum(c.seconds for c in self.calls)
        audio = sum(c.samples for c in self.calls) / sr
        ms = sorted(c.seconds * 1e3 for c in self.calls)
        return {
            "kind": self.kind,
            "exact": self.exact,
            "calls": len(self.calls),
            "frames": self.position,
            "audio_s": audio,
            "first_audio_ms": calls[0].seconds * 1e3 if calls else None,
            "call_ms_median": ms[len(ms) // 2] if ms else None,
            "call_ms_max": ms[-1] if ms else None,
            "rtf": total / audio if audio else None,
            "state_tensors": len(self.state.slots),
            "state_bytes": self.state.nbytes,
            "codebooks_used": self.codebooks_used,
        }

    def run(self, codes, sizes) -> np.ndarray:
        """Push `codes` [n_codebooks, T] in calls of `sizes` frames (an int, or a list used in turn until the codes
        run out), then flush; returns the whole audio (`calls` has each call)."""
        c = self._validate(codes)
        seq = chunk_sizes(sizes, c.shape[1])
        out, at = [], 0
        for k in seq:
            out.append(self.push(c[:, at : at + k]))
            at += k
        out.append(self.flush())
        return np.concatenate(out)


def low_precision_products(decoder, plan) -> bool:
    """Whether some product may read a weight that is not F32: a requested F16/BF16/Q8_0 weight type, F16 im2col
    columns, or, with the file's own types kept, any of its matrices or kernels stored otherwise than F32."""
    if plan.wtype in ("f16", "bf16", "q8_0") or plan.conv == "im2col-f16":
        return True
    return plan.wtype == "native" and any(
        w.type != "F32" for w in decoder.model.weights.values() if len(w.shape) >= 2 and w.role.endswith("weight")
    )


def state_record(key: str, meta: tuple, a: np.ndarray) -> StateRecord:
    """A slot's record from the session's (kind, channels, frames, channels-last) and its tensor."""
    kind, channels, frames, cl = meta
    if kind == "kv":
        order = "[frames, heads, D]"
    else:
        order = "[frames, C]" if cl else "[C, frames]"
    return StateRecord(key, kind, int(channels), int(frames), order, int(a.nbytes))


def check_sizes(sizes) -> list[int]:
    """Chunk sizes (an int, or a sequence of ints >= 1) as a list, in their order; anything else is refused."""
    if isinstance(sizes, (int, np.integer)):
        seq = [sizes]
    else:
        try:
            seq = list(sizes)
        except TypeError:
            raise InvalidInputError(f"chunk sizes must be integers >= 1; got {sizes!r}") from None
    if not seq or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in seq):
        raise InvalidInputError(f"chunk sizes must be integers >= 1; got {sizes!r}")
    return [int(k) for k in seq]


def chunk_sizes(sizes, total: int) -> list[int]:
    """The chunk sizes a stream of `total` frames is pushed in: `sizes` (an int or a sequence of ints >= 1) used in
    turn, the last chunk cut to what is left."""
    seq = check_sizes(sizes)
    out, at, i = [], 0, 0
    while at < total:
        k = min(seq[i % len(seq)], total - at)
        out.append(k)
        at += k
        i += 1
    return out


def parse_sizes(text: str) -> list[int]:
    """'4' or '1,3,7,2,72,5' -> chunk sizes (the command line's --stream)."""
    try:
        seq = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise InvalidInputError(f"--stream takes frames per call, e.g. 4 or 1,3,7; got {text!r}") from None
    return check_sizes(seq)


def offline_in_stream_arithmetic(decoder, codes) -> tuple[np.ndarray, dict[str, str]]:
    """The offline decode a stateful stream's audio is held to, and the choices it makes otherwise than the
    decoder's plan: the decoder's own decode, or, where a streaming call's plan differs from it
    (`LoweringPlan.for_stream`), the offline decode in the streaming plan on the same backends (another decoder of
    the same model, closed after)."""
    plan, changes = decoder.lowering.for_stream()
    if not changes:
        return decoder.decode(codes), changes
    with type(decoder)(decoder.model, plan.replace(), decoder.resolved_backends.requested) as same:
        return same.decode(codes), changes
