"""The streaming what-if: one streaming call of each chunk size placed and priced on each configuration, on the
draws the whole-graph answer uses.

A causal family streams with its state carried (`kzlab.runtime.stream`): each call is one graph of K code frames
whose carried state is graph inputs and outputs. A small call is another graph for the device, not a slice of the
offline one: its products have few src1 rows (HVX below HMX's row minimum), it has its own splits, and each call
pays every split's round trip and copies again. So each (configuration, K) is simulated as its own placement
(`simulate(..., stream=True)`), its CPU nodes priced from a CPU profile of the same streaming graph, scaled as the
whole decode's CPU nodes are (the CPU-only baseline measured on the device), and its device nodes by the same time
model, on the same draws:

- call time: the warm call's total, plus the state's read-back: the bytes of the state outputs the device computed,
  copied out of its buffer at the rate of the copies in (`copy_gbs`); the state's copies in are split inputs;
- P(real time) = P(call time < K frames of audio), a frame lasting `Arch.samples_per_frame(hp) / sample_rate`;
- time to first audio: the first call, with the first-use costs a first decode pays (the device's buffers mapped
  on their first use, `map_us` each), as the whole-graph answer's `first_decode`;
- paced (`pace`: codes arriving at FPS frames a second): chunk i's codes are complete at (i + 1) K / FPS (the last
  chunk's at the utterance's last frame), calls run one after another, playback starts when the first chunk's
  audio is ready, and an underrun is a chunk whose audio is ready after the audio before it ran out; a gap delays
  the rest of the playback. Every call of a draw takes that draw's call time: call-to-call jitter is not modelled.

Correctness: a configuration the whole-graph answer marks wrong stays wrong for every chunk size, and a chunk size
whose own placement puts nodes on a defective path is wrong too (the defect rules are applied to the streaming
graph's nodes, which may take other kernel paths at small K). The streaming graph's arithmetic is not emulated:
a configuration right as a whole decode and without a defect node at K is right at K as far as kzlab knows.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from kzlab.analysis.predict.draws import Draws, ParameterSpace, spread
from kzlab.errors import InvalidOptionError

DEFAULT_UTTERANCE_S = 10.0
DEFAULT_REALTIME_P = 0.9
#: a chunk ready this little after the audio before it ran out is on time (float rounding: with codes paced at the
#: frame rate and a call faster than its audio, every chunk is ready exactly as the one before it runs out)
ON_TIME_MS = 1e-6
#: the largest chunk a streaming what-if prices (a call of more frames is an offline decode's size)
MAX_CHUNK = 4096

MODELLED = (
    "each call's own placement (its products' kernel paths at K rows, its splits), priced by the whole-graph time "
    "model on the same draws: CPU nodes from a CPU profile of the streaming graph scaled as the whole decode's, "
    "device nodes by rate and bandwidth plus a dispatch each (launch_us), per split a round trip (sync_us), input "
    "copies (the carried state included) and cache maintenance; the state's read-back at copy_gbs; the first "
    "call's buffer mappings (map_us)"
)
NOT_MODELLED = (
    "call-to-call jitter (every call of a draw takes that draw's time), a per-call fixed cost of the graph "
    "compute beyond the splits' round trips (the host's graph planning, a FastRPC session's first open), the "
    "host's time to set the inputs and read the waveform, and the streaming graph's arithmetic (not emulated: "
    "correctness is the whole decode's verdict and the defect rules on the streaming graph's nodes)"
)


@dataclass(frozen=True)
class StreamQuestion:
    """What a streaming what-if asks: the chunk sizes (code frames a call), the codes' pace (frames a second, None:
    not paced), the utterance's length for the pace, and the probability of real time a chunk must reach."""

    sizes: tuple[int, ...]
    pace: float | None = None
    utterance_s: float = DEFAULT_UTTERANCE_S
    realtime_p: float = DEFAULT_REALTIME_P

    @classmethod
    def of(cls, sizes: Any, pace: Any = None, utterance_s: Any = None, realtime_p: Any = None) -> StreamQuestion:
        """Checked: sizes an int, a list of ints or "K,K,..." text, each from 1 to MAX_CHUNK; pace > 0; the
        utterance > 0 s; realtime_p in (0, 1]."""
        items = sizes.split(",") if isinstance(sizes, str) else [sizes] if isinstance(sizes, int) else list(sizes)
        out = []
        for x in items:
            try:
                k = int(x.strip()) if isinstance(x, str) else x
            except ValueError:
                k = None
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_CHUNK:
                raise InvalidOptionError(f"stream chunk size {x!r}: expected code frames a call, an integer from 1 "
                                         f"to {MAX_CHUNK} (e.g. --stream 1,4,16,72)")
            out.append(k)
        if not out:
            raise InvalidOptionError("stream: give at least one chunk size (e.g. --stream 1,4,16,72)")
        if pace is not None and (isinstance(pace, bool) or not isinstance(pace, int | float)
                                 or not math.isfinite(pace) or pace <= 0):
            raise InvalidOptionError(f"pace={pace!r}: expected the codes' arrival rate in frames a second, > 0 "
                                     "(e.g. --pace 12.5)")
        u = DEFAULT_UTTERANCE_S if utterance_s is None else utterance_s
        if isinstance(u, bool) or not isinstance(u, int | float) or not math.isfinite(u) or u <= 0:
            raise InvalidOptionError(f"utterance={utterance_s!r}: expected the utterance's length in seconds, > 0")
        p = DEFAULT_REALTIME_P if realtime_p is None else realtime_p
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1:
            raise InvalidOptionError(f"realtime_p={realtime_p!r}: expected a probability in (0, 1]")
        return cls(tuple(sorted(set(out))), None if pace is None else float(pace), float(u), float(p))


def frame_ms(hp: Any) -> float:
    """One code frame's audio in milliseconds, from the family (`Arch.samples_per_frame` / the sample rate)."""
    from kzlab.arch import arch_of

    return 1e3 * arch_of(hp).samples_per_frame(hp) / float(hp.sample_rate)


def check_streamable(hp: Any) -> None:
    """Refuse a family without a stateful stream before anything is profiled."""
    from kzlab.arch import arch_of

    a = arch_of(hp)
    if not getattr(a, "causal", False):
        raise InvalidOptionError(f"--stream: the {a.name} family is not causal, it has no stateful stream to price "
                                 "(its stream decodes overlapping windows: `kzlab decode --stream`)")


def extend_draws(draws: Draws, predictions: dict[str, Any], seed: int) -> Draws:
    """`draws` with a column for every parameter the streaming predictions read that the whole-graph draws lack
    (a kernel path or op only a small call takes), drawn over its range apart (seed + 1), so that the whole-graph
    answer's draws, and every number made of them, stay what they are without --stream."""
    space = ParameterSpace.shared_by(predictions)
    missing = [n for n in space.names if n not in draws.names]
    if not missing:
        return draws
    extra = ParameterSpace({n: space.params[n] for n in missing}).sample(len(draws), seed + 1)
    return Draws(draws.names + extra.names, np.hstack([draws.theta, extra.theta]), draws.seed,
                 {**draws.params, **extra.params}, draws.kind)


def readback_bytes(placement: Any) -> int:
    """The bytes of the state outputs a device backend computed (read back to the host after each call)."""
    cpu = placement.config["backends"][-1]
    out = 0
    for n in placement.nodes:
        if n.name.startswith("state_out:") and n.backend != cpu:
            k = 1
            for x in n.ne:
                k *= int(x)
            out += 4 * k  # the state is F32
    return out


def products(placement: Any) -> dict[str, int]:
    """The call's products by where they run: `hmx`, `hvx` (a device's kernel paths), or the backend's name."""
    c = Counter((n.path or n.backend) for n in placement.nodes if n.op == "MUL_MAT")
    return dict(sorted(c.items()))


def paced(call: np.ndarray, first: np.ndarray, k: int, pace: float, frame: float,
          utterance_s: float) -> dict[str, Any]:
    """Codes arriving at `pace` frames/s, an utterance of `utterance_s` s decoded in calls of `k` frames (each call
    `call` ms, the first `first` ms, per draw): P(underrun), the gaps' total and the first audio after the first
    code (ms)."""
    frames = max(1, round(utterance_s * 1e3 / frame))
    n = -(-frames // k)
    per = 1e3 / pace  # ms between two codes
    arrive = np.minimum((np.arange(n) + 1) * k, frames) * per  # chunk i's codes complete
    size = np.minimum(k, frames - np.arange(n) * k)  # the frames each chunk plays
    end = arrive[0] + first
    play_end = end + size[0] * frame  # when the audio queued so far runs out
    gap = np.zeros_like(call)
    count = np.zeros_like(call)
    for i in range(1, n):
        end = np.maximum(end, arrive[i]) + call
        late = np.where(end - play_end > ON_TIME_MS, end - play_end, 0.0)
        gap += late
        count += late > 0
        play_end = np.maximum(play_end, end) + size[i] * frame
    return {"p_underrun": float(np.mean(count > 0)), "gap_ms": _pct(gap), "underruns": _pct(count),
            "first_audio_ms": _pct(arrive[0] + first), "calls": int(n), "utterance_frames": int(frames)}


def _pct(x: np.ndarray) -> dict[str, float]:
    s = spread(x)
    return {"p10": s["p10"], "p50": s["p50"], "p90": s["p90"]}


def stream_verdict(whole: Any, placement: Any) -> tuple[bool | None, str]:
    """A chunk size's correctness: the whole decode's verdict, and the streaming graph's own defect nodes (a path
    that approximates its op is judged by the whole decode's emulation)."""
    from kzlab.analysis.placement.defects import APPROXIMATION, kind_of

    n = placement.defect_nodes
    own = "; ".join(f"{d['n_nodes']} node(s) of the streaming call on a defective path: {d['title']} [{d['id']}]"
                    for d in placement.defects if kind_of(d) != APPROXIMATION)
    if whole.correct is False:
        return False, f"the whole decode computes wrong output ({whole.why})" + (f"; {own}" if own else "")
    if n:
        return False, own
    if whole.correct is None:
        return None, f"correctness not known ({whole.why or 'not emulated'})"
    approx = placement.approximate_nodes
    return True, ("right as a whole decode, and no node of the streaming call on a defective path"
                  + (f" (its {approx} node(s) on a path that approximates their op are the whole decode's, which "
                     "the emulation judged)" if approx else ""))


def price(placements: dict[int, Any], draws: Draws, whole: Any, q: StreamQuestion, frame: float) -> dict[str, Any]:
    """One configuration's streaming answer: per chunk size (string keys) the call time's range, P(real time), the
    time to first audio's range, the products by kernel path, the splits, the state's bytes and copies, the
    verdict, and paced, P(underrun); `recommended_chunk`: the smallest size with P(real time) >= q.realtime_p
    among the right ones (None, with why, where none is)."""
    out: dict[str, Any] = {}
    for k, pl in sorted(placements.items()):
        pr = pl.predicted
        ev = pr.costs.evaluate(draws)
        back = readback_bytes(pl)
        dev = pl.config["backends"][0]
        rate = f"{dev}.copy_gbs"
        back_ms = np.zeros(len(draws))
        if back and rate in draws.names:
            back_ms = back / (draws.column(rate) * 1e9) * 1e3
        call = ev["total"] + back_ms
        first = call + ev["first"]
        audio = k * frame
        correct, why = stream_verdict(whole, pl)
        row = {"frames": k, "audio_ms": audio, "call_ms": _pct(call), "call_range": spread(call),
               "p_realtime": float(np.mean(call < audio)), "first_audio_ms": _pct(first),
               "first_call_added_ms": float(np.median(ev["first"])), "buffers_mapped": pr.first_buffers,
               "splits": pl.n_splits, "products": products(pl), "defect_nodes": pl.defect_nodes,
               "state_bytes": int(pl.config.get("state_bytes", 0)), "state_readback_bytes": back,
               "state_readback_ms": float(np.median(back_ms)), "copy_ms": float(np.median(ev["copy"])),
               "sync_ms": float(np.median(ev["sync"])), "correct": correct, "why": why}
        if back and rate not in draws.names:
            row["state_readback_ms"] = None
            row["state_readback_note"] = f"not priced: {dev} has no copy rate in this prediction"
        if q.pace is not None:
            row["paced"] = paced(call, first, k, q.pace, frame, q.utterance_s)
            row["p_underrun"] = row["paced"]["p_underrun"]
        out[str(k)] = row
    return out


def recommend_chunk(rows: dict[str, Any], p: float) -> dict[str, Any]:
    """The smallest chunk size whose P(real time) >= p among the sizes that compute the right audio."""
    ok = [r for r in rows.values() if r["correct"] is True and r["p_realtime"] >= p]
    if ok:
        r = min(ok, key=lambda r: r["frames"])
        return {"frames": r["frames"], "p_realtime": r["p_realtime"], "call_ms": r["call_ms"],
                "first_audio_ms": r["first_audio_ms"],
                "why": f"the smallest chunk with P(real time) >= {p:g} that computes the right audio"}
    if not any(r["correct"] is True for r in rows.values()):
        wrong = next((r["why"] for r in rows.values() if r["correct"] is not True), "")
        return {"frames": None, "why": f"no chunk size computes the right audio as far as kzlab knows: {wrong}"}
    best = max(rows.values(), key=lambda r: (r["correct"] is True, r["p_realtime"]))
    return {"frames": None, "why": f"no chunk size asked keeps real time with P >= {p:g} (the best: "
            f"{best['frames']} frames, P = {best['p_realtime']:.2f})"}


def recommend_overall(configs: dict[str, dict[str, Any]], p: float) -> dict[str, Any]:
    """Across configurations: the smallest chunk that keeps real time with P >= p on a configuration that computes
    the right audio (ties: the lowest p50 time to first audio), and the wrong configurations that would have kept
    it with a smaller chunk (never recommended)."""
    ok = [(name, r) for name, rows in configs.items() for r in rows.values()
          if r["correct"] is True and r["p_realtime"] >= p]
    faster_wrong = lambda k: [  # noqa: E731
        {"name": name, "frames": r["frames"], "p_realtime": r["p_realtime"], "why": r["why"]}
        for name, rows in configs.items() for r in rows.values()
        if r["correct"] is not True and r["p_realtime"] >= p and (k is None or r["frames"] < k)]
    if not ok:
        return {"config": None, "frames": None, "why": f"no configuration that computes the right audio keeps real "
                f"time with P >= {p:g} at any chunk size asked", "not_recommended": faster_wrong(None)}
    name, r = min(ok, key=lambda x: (x[1]["frames"], x[1]["first_audio_ms"]["p50"]))
    return {"config": name, "frames": r["frames"], "p_realtime": r["p_realtime"], "call_ms": r["call_ms"],
            "first_audio_ms": r["first_audio_ms"],
            "why": f"the smallest chunk with P(real time) >= {p:g} on a configuration that computes the right audio "
                   "(ties: the lowest p50 time to first audio)",
            "not_recommended": faster_wrong(r["frames"])}


def frames_text(k: int) -> str:
    return f"{k} frame" + ("" if k == 1 else "s")


def table(name: str, rows: dict[str, Any], rec: dict[str, Any], paced_on: bool) -> list[str]:
    """One configuration's compact table (text output)."""
    verdicts = {r["correct"] for r in rows.values()}
    state = ("RIGHT audio" if verdicts == {True} else "WRONG OUTPUT" if verdicts == {False}
             else "mixed: see each size" if len(verdicts) > 1 else "correctness not known")
    lines = [f"  {name} ({state})",
             f"    {'K':>4} {'audio':>6} {'call p10/p50/p90':>20} {'P(rt)':>6} {'first audio p10/p50/p90':>24} "
             f"{'splits':>6}" + (f" {'P(underrun)':>11}" if paced_on else "") + "  products"]

    def r3(x: dict[str, float]) -> str:
        return f"{x['p10']:.0f}/{x['p50']:.0f}/{x['p90']:.0f}"

    for r in rows.values():
        prod = " ".join(f"{k} {v}" for k, v in r["products"].items())
        flag = "" if r["correct"] is True else "  WRONG" if r["correct"] is False else "  ?"
        lines.append(f"    {r['frames']:>4} {r['audio_ms']:>6.0f} {r3(r['call_ms']):>20} {r['p_realtime']:>6.2f} "
                     f"{r3(r['first_audio_ms']):>24} {r['splits']:>6}"
                     + (f" {r['p_underrun']:>11.2f}" if paced_on else "") + f"  {prod}{flag}")
    lines.append(f"    recommended chunk: {frames_text(rec['frames'])}" if rec.get("frames") else
                 f"    recommended chunk: none ({rec['why']})")
    return lines
