"""The user-facing decoder: codes (or any stage's input) in, 24 kHz audio out.

`Decoder` validates everything in numpy before a graph is built, so wrong codes are a Python exception,
never a GGML_ASSERT. It keeps one `Session` (weights uploaded once, one graph per shape) and reproduces
upstream's `chunked_decode` for long inputs. Codes with fewer codebooks than the decoder's, where the family
decodes the first n (kzlab.codes), run a graph built for n on the same weights (`Session.graph`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kzlab.arch import Arch, arch_of
from kzlab.codes import validate_codes
from kzlab.errors import InvalidInputError
from kzlab.graph.options import Lowering, LoweringPlan
from kzlab.loader import load_model
from kzlab.model.model import Model
from kzlab.progress import Progress, ProgressFn
from kzlab.runtime.budget import check_session_budget, parse_budget
from kzlab.runtime.remote import RemoteSession
from kzlab.runtime.session import Session, codebooks_of
from kzlab.runtime.spec import BackendSpec, ResolvedBackends, is_rpc


def __getattr__(name: str):
    if name == "STAGE_ALIASES":  # kzlab 0.2 had the first family's aliases here; each family has its own now
        from kzlab.arch import family_names, get_arch

        return get_arch(family_names()[0]).stage_aliases
    raise AttributeError(f"module 'kzlab.runtime.decoder' has no attribute {name!r}")


@dataclass
class DecodeOutput:
    """A decode with its intermediates: `stages` maps each stage name to its [C, T] output; `codebooks_used`: the
    codes' codebook count (the first n of the decoder's; None for a decoder of latents)."""

    wav: np.ndarray
    stages: dict[str, np.ndarray] = field(default_factory=dict)
    sample_rate: int = 24000
    codebooks_used: int | None = None


class Decoder:
    """A loaded decoder bound to a backend setup and a lowering."""

    def __init__(
        self,
        model: Model,
        lowering: Lowering | None = None,
        backends: BackendSpec | None = None,
        memory_budget: int | str | None = None,
        rpc_timeout: float | None = None,
        **backend_kw,
    ):
        """`backends`: a BackendSpec, or its fields as keywords (backend=, threads=, sched=, op_offload=,
        weights_on=); resolved once, with the lowering, when the session opens."""
        self.model = model
        #: bytes (or '4GB'); None: kzlab.runtime.budget's default, a share of the RAM available at each decode
        self.memory_budget = memory_budget
        parse_budget(memory_budget)
        spec = BackendSpec.from_kw(backends, **backend_kw)
        if any(is_rpc(n) for n in spec.names()):
            # ggml aborts the process when an RPC server goes away: keep that in a worker process
            self.session = RemoteSession(model, lowering, spec, rpc_timeout)
        else:
            self.session = Session(model, lowering, spec)

    @property
    def hparams(self):
        return self.model.hparams

    @property
    def lowering(self) -> LoweringPlan:
        """The resolved lowering (no `auto` left): what this decoder's graphs are built from."""
        return self.session.plan

    @property
    def plan(self) -> LoweringPlan:
        return self.session.plan

    @property
    def mode(self) -> str:
        """`portable` (ggml ops only) or `fast` (kzlab's fused CPU nodes): what the graphs really are."""
        return self.session.plan.mode

    @property
    def resolved_backends(self) -> ResolvedBackends:
        return self.session.resolved

    @property
    def backend_label(self) -> str:
        """What runs: `cpu`, `sched[blas+cpu]`, ... (resolved, not what was asked)."""
        return self.session.resolved.label

    @property
    def sample_rate(self) -> int:
        return self.model.hparams.sample_rate

    @property
    def arch(self) -> Arch:
        """The decoder family (kzlab.arch): stages, chunking, samples per frame."""
        return arch_of(self.hparams)

    def stages(self) -> list[str]:
        return [s.name for s in self.arch.stages(self.hparams)]

    # ---- decoding -----------------------------------------------------------------------------------------
    def decode(
        self,
        codes,
        chunked: bool = False,
        chunk_size: int | None = None,
        left_context: int | None = None,
        intermediates: bool = False,
        progress: ProgressFn | bool | None = None,
        right_context: int | None = None,
        split: bool | None = None,
    ):
        """Codes [n_codebooks, T] -> waveform float32 [T * samples per frame] (a DecodeOutput when
        intermediates=True). A one-codebook family also takes codes [T]; a decoder whose first stage takes
        latents takes them here ([channels, T] floats, `kzlab.codes.validate_latents`).

        `chunk_size`, `left_context` and `right_context` (frames decoded after each chunk and dropped: a lookahead)
        default to the family's (`kzlab.arch.Arch`: 300, 25 and 0 frames for the first family). A family whose
        early blocks see the whole sequence says where to split (`Arch.chunk_split`): with `split` (None: the
        default where the family has one) those blocks run once on the whole sequence, and only the local rest
        in chunks, with at least the context it reaches on each side, so that chunks join exactly; `split=False`
        runs every chunk through the whole decoder (upstream's chunked_decode, an approximation there).
        `progress` (chunked decodes, per chunk): None = a bar unless kzlab is quiet, False = none, or fn(done,
        total). Codes may have fewer codebooks than the decoder where its family decodes the first n
        (`kzlab.codes.codebook_range`); `DecodeOutput.codebooks_used` says how many were."""
        if self.hparams.num_quantizers == 1 and np.ndim(codes) == 1:
            codes = np.asarray(codes)[None, :]
        c = validate_codes(codes, self.hparams)
        chunk_size = self.arch.chunk_size if chunk_size is None else chunk_size
        left_context = self.arch.left_context if left_context is None else left_context
        right_context = getattr(self.arch, "right_context", 0) if right_context is None else right_context
        if chunked:
            if intermediates:
                raise InvalidInputError("intermediates are not available with chunked=True")
            return self._decode_chunked(c, chunk_size, left_context, progress, right_context, split)
        out = self._run(c.shape[1], {"codes": c}, stages=intermediates)
        wav = out.pop("wav")[0]
        used = int(c.shape[0]) if self.takes_codes else None
        return DecodeOutput(wav, out, self.sample_rate, used) if intermediates else wav

    def decode_from(self, stage: str, x, intermediates: bool = False):
        """Start at `stage` with its input x [C, T] (e.g. stage='decoder.0' or 'latent': the latent)."""
        aliases = self.arch.stage_aliases
        stage = aliases.get(stage, stage)
        names = self.stages()
        if stage not in names:
            also = f" (or {', '.join(map(repr, aliases))})" if aliases else ""
            raise InvalidInputError(f"unknown stage {stage!r}: one of {', '.join(names)}{also}")
        if stage == names[0]:  # codes, or the latents of a decoder whose first stage takes them
            return self.decode(x, intermediates=intermediates)
        a = self.float_input(stage, x)
        frames = self._frames_for(stage, a.shape[1])
        out = self._run(frames, {"x": a}, start=stage, stages=intermediates)
        wav = out.pop("wav")[0]
        return DecodeOutput(wav, out, self.sample_rate) if intermediates else wav

    @property
    def takes_codes(self) -> bool:
        """Whether the decoder's first stage takes codes (else float latents, e.g. PocketTTS's)."""
        from kzlab.codes import takes_codes

        return takes_codes(self.hparams)

    def float_input(self, stage: str, x) -> np.ndarray:
        """A stage's float input [C, T] as float32, or an InvalidInputError that says what is wrong."""
        from kzlab.codes import validate_float

        return validate_float(x, self.arch.stage_input_shape(self.hparams, stage, 1)[0], f"the input of {stage}")

    def _frames_for(self, stage: str, t: int) -> int:
        per = self.arch.stage_input_shape(self.hparams, stage, 1)[1]
        if t % per:
            raise InvalidInputError(f"the input of {stage} must have a length that is a multiple of {per}; got {t}")
        return t // per

    def _decode_chunked(
        self,
        codes: np.ndarray,
        chunk_size: int,
        left_context: int,
        progress: ProgressFn | bool | None = None,
        right_context: int = 0,
        split: bool | None = None,
    ) -> np.ndarray:
        """Upstream chunked_decode: chunks of `chunk_size` frames, each decoded with `left_context` frames before
        it and `right_context` frames after it (both dropped from the output). With right_context 0 this is
        exactly upstream's; a lookahead helps a family whose blocks see the whole sequence (attention, GroupNorm)
        or whose output frames overlap their neighbours' (an inverse STFT)."""
        for name, v, low in (("chunk_size", chunk_size, 1), ("left_context", left_context, 0),
                             ("right_context", right_context, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidInputError(f"{name} must be an integer >= {low}; got {v!r}")
        if split not in (None, True, False):
            raise InvalidInputError(f"split must be True, False or None; got {split!r}")
        where = self.arch.chunk_split(self.hparams)
        if split and where is None:
            raise InvalidInputError(f"the {self.arch.name} family has no split point for chunked decodes")
        up = self.arch.samples_per_frame(self.hparams)
        T = codes.shape[1]
        inputs, start_stage = {"codes": codes}, None
        if where is not None and split is not False:
            stop, start_stage, reach = where
            # the blocks that see the whole sequence run once, on all of it; the rest is local to `reach` frames
            x = self._run(T, {"codes": codes}, stop=stop)[stop]
            inputs = {"x": x}
            left_context, right_context = max(left_context, reach), max(right_context, reach)
        pieces = []
        start = 0
        with Progress(-(-T // chunk_size), "decoding chunks", progress, unit="chunk") as bar:
            while start < T:
                end = min(start + chunk_size, T)
                ctx = left_context if start - left_context > 0 else start
                ahead = min(right_context, T - end)
                part = {k: np.ascontiguousarray(v[:, start - ctx : end + ahead]) for k, v in inputs.items()}
                wav = self._run(ctx + end - start + ahead, part, start=start_stage)["wav"][0]
                pieces.append(wav[ctx * up : (ctx + end - start) * up])
                start = end
                bar.step()
        return np.concatenate(pieces)

    def stream(self, left: int | None = None, lookahead: int | None = None):
        """A stream of this decoder (`kzlab.runtime.stream.Stream`): `push(codes)` returns the audio of the frames
        pushed, `flush()` the rest. A causal family carries its state (exact against `decode`); another decodes
        overlapping windows of `left` frames before and `lookahead` after each call's frames (its defaults:
        `Arch.stream_context`), and says so (`Stream.kind`, `Stream.describe()`)."""
        from kzlab.runtime.stream import Stream

        return Stream(self, left, lookahead)

    def decode_stream(self, codes, sizes, left: int | None = None, lookahead: int | None = None):
        """Codes [n_codebooks, T] streamed in calls of `sizes` frames (an int, or a list used in turn): returns
        (waveform, the Stream with its calls and state)."""
        s = self.stream(left, lookahead)
        return s.run(codes, sizes), s

    def run_stream_call(self, frames: int, inputs: dict, state: dict, position: int):
        """session.run_stream behind the memory-budget check (a worker session checks in its own process)."""
        if isinstance(self.session, RemoteSession):
            return self.session.run_stream(frames, inputs, state, position, memory_budget=self.memory_budget)
        check_session_budget(self.session, frames, None, self.memory_budget, stream=True,
                             codebooks=codebooks_of(self.hparams, inputs))
        return self.session.run_stream(frames, inputs, state, position)

    def _run(
        self, frames: int, inputs: dict, start: str | None = None, stages: bool = False, stop: str | None = None
    ) -> dict:
        """session.run behind the memory-budget check (a worker session checks in its own process)."""
        if isinstance(self.session, RemoteSession):
            return self.session.run(frames, inputs, start, stages, memory_budget=self.memory_budget, stop=stop)
        check_session_budget(self.session, frames, start, self.memory_budget, stages, stop,
                             codebooks=codebooks_of(self.hparams, inputs, start))
        return self.session.run(frames, inputs, start, stages, stop)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Decoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Decoder({Path(self.model.path).name}, family={self.model.family}, layout={self.model.layout}, "
            f"backend={self.backend_label}, {self.lowering.label(self.arch.not_applicable)})"
        )


def load(
    path,
    layout=None,
    lowering: Lowering | None = None,
    backend: str | list[str] | None = None,
    threads: int | None = None,
    sched: bool | None = None,
    op_offload: bool = True,
    weights_on: str | None = None,
    memory_budget: int | str | None = None,
    overrides: dict | None = None,
    backends: BackendSpec | None = None,
    hparams: dict | None = None,
    **lowering_kw,
) -> Decoder:
    """Load a decoder file (GGUF or HF directory) and bind it to a backend: the main entry point.

    Backends: `backends=BackendSpec(...)` or its fields as keywords (`backend="auto"`, `sched=None`, ...);
    `sched=False` means no scheduler. Lowering: `lowering=Lowering(...)` or its fields as keywords, `mode`
    among them (`mode="portable"`: ggml ops only; `"fast"`: kzlab's fused CPU nodes). `hparams` gives
    hyperparameters the file cannot tell, e.g. `{"num_heads": 4}` or `{"group_norm_groups": 16}` (each family
    accepts its own; `overrides` is the older name)."""
    if lowering_kw:
        lowering = (lowering or Lowering()).replace(**lowering_kw)
    spec = BackendSpec.from_kw(
        backends, backend=backend, threads=threads, sched=sched, op_offload=op_offload, weights_on=weights_on
    )
    model = load_model(path, layout=layout, overrides=overrides, hparams=hparams)
    return Decoder(model, lowering, spec, memory_budget)
