"""`kzlab decode MODEL (--codes C.npy | --latents L.npy) -o OUT.wav [--npy OUT.npy] [--chunked] [--stream K]`."""

from __future__ import annotations

import time

import numpy as np

from kzlab.codes import load_codes
from kzlab.commands.common import add_backend, add_lowering, add_model, backend_spec, lowering_from, open_model


def register(sub) -> None:
    p = sub.add_parser("decode", help="decode codes to a WAV file")
    add_model(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--codes", help="codes [n_codebooks, T] as .npy (or .npz with 'codes', or .json); where the "
                     "family decodes the first n of its codebooks, any n from 1 to the file's (kzlab info says)")
    src.add_argument("--latents", help="continuous latents [channels, T] as .npy, for a decoder whose first stage "
                     "takes them instead of codes")
    p.add_argument("-o", "--output", required=True, help="output WAV (24 kHz, float32)")
    p.add_argument("--npy", help="also write the raw float32 samples as .npy")
    p.add_argument("--chunked", action="store_true", help="upstream chunked decode (300 frames + 25 of context)")
    p.add_argument("--chunk-size", type=int, default=None, help="frames per chunk (default: the family's)")
    p.add_argument("--left-context", type=int, default=None, help="frames of left context (default: the family's)")
    p.add_argument("--stream", metavar="K[,K...]", default=None,
                   help="decode as a stream: K frames per call, or a list of sizes used in turn (e.g. 1,3,7); a "
                   "causal family carries its state (exact), another decodes overlapping windows (it says so)")
    p.add_argument("--lookahead", type=int, default=None,
                   help="a windowed stream's frames after each call's (default: the family's)")
    add_backend(p)
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.audio import write_wav
    from kzlab.runtime.decoder import Decoder

    dec = Decoder(open_model(args), lowering_from(args), backend_spec(args))
    try:
        codes = _input(args, dec)
    except BaseException:
        dec.close()
        raise
    if args.stream is not None:
        try:
            return _run_stream(args, dec, codes)
        finally:
            dec.close()
    try:
        t0 = time.perf_counter()
        if args.chunked:
            wav = dec.decode(codes, chunked=True, chunk_size=args.chunk_size, left_context=args.left_context)
            stages = {}
        else:
            out = dec.decode(codes, intermediates=True)
            wav, stages = out.wav, out.stages
        dt = time.perf_counter() - t0
        used = _codebooks_used(dec, codes)
        if used:
            print(used)
        if stages:
            names = dec.arch.summary_stages(dec.hparams)
            ts = [stages[n].shape[1] for n in names]
            print("T-evolution " + " -> ".join(str(t) for t in ts) + " samples")
            print("channels    " + " -> ".join(str(stages[n].shape[0]) for n in names) + " -> 1")
        write_wav(args.output, wav, dec.sample_rate)
        if args.npy:
            np.save(args.npy, wav.astype(np.float32))
        print(
            f"wrote {args.output}: {wav.shape[0]} samples ({wav.shape[0] / dec.sample_rate:.2f} s) "
            f"in {dt:.2f} s on {dec.backend_label}, {dec.mode} mode ({dec.lowering.label(dec.arch.not_applicable)})"
        )
    finally:
        dec.close()
    return 0


def _codebooks_used(dec, codes) -> str:
    """The line that says how many codebooks a decode used, for a decoder whose codes may have fewer than it has
    (kzlab.codes.codebook_range); empty where the count is fixed (nothing was chosen) or there are no codes. Read
    after the decode, so the codes were validated: [n, T] or [1, n, T]."""
    from kzlab.codes import codebook_range

    if not dec.takes_codes:
        return ""
    lo, hi = codebook_range(dec.hparams)
    if lo == hi:
        return ""
    n = int(np.shape(codes)[-2])
    return f"codebooks   {n} used: the first {n} of the {hi} this decoder decodes ({lo} to {hi})"


def _input(args, dec):
    """The codes, or the latents, as the decoder's first stage takes them (a KzlabError names a mismatch)."""
    from kzlab.errors import InvalidInputError

    if args.codes is not None:
        if not dec.takes_codes:
            raise InvalidInputError(f"{dec.arch.label}: this decoder takes latents (--latents FILE.npy), not codes")
        return load_codes(args.codes)
    if dec.takes_codes:
        raise InvalidInputError(f"{dec.arch.label}: this decoder takes codes (--codes FILE.npy), not latents")
    try:
        return np.load(args.latents, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InvalidInputError(f"{args.latents}: cannot read latents as a .npy array: {e}") from None


def _run_stream(args, dec, codes) -> int:
    from kzlab.audio import write_wav
    from kzlab.codes import validate_codes
    from kzlab.runtime.stream import parse_sizes

    sizes = parse_sizes(args.stream)
    stream = dec.stream(left=args.left_context, lookahead=args.lookahead)
    if dec.takes_codes and np.ndim(codes) >= 2:  # the graphs of the codes' own codebook count
        codes = validate_codes(codes, dec.hparams)
        stream.prepare(sizes, int(codes.shape[0]))
    else:
        stream.prepare(sizes)
    wav = stream.run(codes, sizes)
    write_wav(args.output, wav, dec.sample_rate)
    if args.npy:
        np.save(args.npy, wav.astype(np.float32))
    s = stream.summary()
    print(stream.describe())
    used = _codebooks_used(dec, codes)
    if used:
        print(used)
    print(f"calls {s['calls']} ({','.join(map(str, sizes))} frames each), first audio {s['first_audio_ms']:.1f} ms "
          f"(graphs prepared), call median {s['call_ms_median']:.1f} ms, max {s['call_ms_max']:.1f} ms, "
          f"real-time factor {s['rtf']:.3f}")
    if stream.kind == "stateful":
        print(f"state: {s['state_tensors']} tensors, {s['state_bytes'] / 1e6:.2f} MB")
    print(f"wrote {args.output}: {wav.shape[0]} samples ({wav.shape[0] / dec.sample_rate:.2f} s) on "
          f"{dec.backend_label}, {dec.mode} mode ({dec.lowering.label(dec.arch.not_applicable)})"
          + "".join(f"; streaming calls: {k} {v}" for k, v in stream.plan_changes.items()))
    return 0
