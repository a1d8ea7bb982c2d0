"""The compute-memory budget: a graph whose compute buffer would not fit is refused before allocation.

A graph that does not fit in memory makes ggml abort (or the machine swap) while allocating; in a notebook
either kills the kernel. `estimate_compute_bytes` measures a graph's compute buffer with ggml's own
allocator in size-only mode (nothing is allocated) and `check_session_budget` refuses graphs above the
budget, with the chunk size that would fit.
"""

from __future__ import annotations

import ctypes
import math
import os
from typing import Any

from kzlab.errors import InvalidOptionError, ResourceError

#: share of the available RAM a single graph's compute buffer may take by default
DEFAULT_BUDGET_FRACTION = 0.5
_budget_override: int | None = None


def available_memory() -> int:
    """Bytes of RAM available now (MemAvailable on Linux; total physical memory elsewhere)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def parse_budget(value: Any, what: str = "memory_budget") -> int | None:
    """An explicit budget: bytes as an int, or a string like '2GB', '512MiB'; None means the default."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidOptionError(f"{what}={value!r}: expected a byte count such as 2_000_000_000 or '2GB'")
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return int(value)
    if isinstance(value, str):
        s = value.strip().upper().replace(" ", "")
        units = {"TIB": 1 << 40, "GIB": 1 << 30, "MIB": 1 << 20, "KIB": 1 << 10, "TB": 10**12, "GB": 10**9}
        units.update({"MB": 10**6, "KB": 10**3, "B": 1})
        for u, m in units.items():
            if s.endswith(u):
                try:
                    n = float(s[: -len(u)])
                except ValueError:
                    break
                if math.isfinite(n) and n > 0:
                    return int(n * m)
                break
    raise InvalidOptionError(f"{what}={value!r}: expected a byte count such as 2_000_000_000 or '2GB'")


def set_memory_budget(value: Any) -> None:
    """Set the process-wide default budget (None: back to a share of available RAM)."""
    global _budget_override
    _budget_override = parse_budget(value)


def memory_budget(explicit: Any = None) -> int:
    """The budget that applies: the explicit value, else set_memory_budget's, else KZLAB_MEMORY_BUDGET,
    else DEFAULT_BUDGET_FRACTION of the RAM available now."""
    b = parse_budget(explicit)
    if b is not None:
        return b
    if _budget_override is not None:
        return _budget_override
    env = os.environ.get("KZLAB_MEMORY_BUDGET")
    if env:
        return parse_budget(env, "KZLAB_MEMORY_BUDGET") or 0
    return int(available_memory() * DEFAULT_BUDGET_FRACTION)


def graph_compute_bytes(gf: Any, buft: Any) -> int:
    """The compute buffer ggml's graph allocator would need for `gf` on `buft`, computed without allocating
    (ggml_gallocr_reserve_n_size): the same number `ggml_gallocr_get_buffer_size` reports afterwards."""
    from ggml import ggml as g

    alloc = g.ggml_gallocr_new(buft)
    if not alloc:
        raise ResourceError("could not create a ggml graph allocator to measure the compute buffer")
    try:
        sizes = (ctypes.c_size_t * 1)()
        g.ggml_gallocr_reserve_n_size(alloc, gf, None, None, sizes)
        return int(sizes[0])
    finally:
        g.ggml_gallocr_free(alloc)


def estimate_compute_bytes(
    session: Any, frames: int, start: str | None = None, stages: bool = False, stop: str | None = None,
    stream: bool = False, codebooks: int | None = None,
) -> int:
    """Build the graph for `frames` on the session's weights (no allocation) and measure its compute buffer;
    `codebooks`: of codes with fewer codebooks than the decoder's (`Session.graph`)."""
    from ggml import ggml as g

    from kzlab.graph.build import build_graph

    weights, plan = session.stream_weights() if stream else (session.ensure_weights(), session.plan)
    hp = session.hparams_for(codebooks) if codebooks is not None else session.model.hparams
    b = build_graph(weights, plan, hp, frames, start, stages, stop, stream)
    try:
        buft = g.ggml_backend_get_default_buffer_type(session.backends.primary.handle)
        return graph_compute_bytes(b.gf, buft)
    finally:
        b.free()


def suggest_chunk(
    session: Any, budget: int, frames: int, left_context: int | None = None, start: str | None = None,
    codebooks: int | None = None,
) -> int:
    """The largest chunk_size (frames, before `left_context`, default the family's) whose graph fits `budget`;
    0 if none does."""
    if left_context is None:
        from kzlab.arch import arch_of

        left_context = arch_of(session.model.hparams).left_context
    lo, hi = 0, frames
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_compute_bytes(session, mid + left_context, start, codebooks=codebooks) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_session_budget(
    session: Any, frames: int, start: str, budget: Any = None, stages: bool = False, stop: str | None = None,
    stream: bool = False, codebooks: int | None = None,
) -> None:
    """Refuse, before any allocation, a graph whose compute buffer would exceed the memory budget; `codebooks`:
    the count of codes with fewer codebooks than the decoder's (`kzlab.runtime.session.codebooks_of`).

    Shapes the session already allocated passed this check before; they are not measured again.
    """
    from kzlab.graph.build import first_stage
    from kzlab.runtime.session import graph_key

    key = graph_key(start or first_stage(session.model.hparams), frames, stages, stop, stream, codebooks)
    if key in getattr(session, "_graphs", {}):
        return
    limit = memory_budget(budget)
    need = estimate_compute_bytes(session, frames, start, stages, stop, stream, codebooks)
    if need <= limit:
        return
    hint = ""
    if stop is not None:
        hint = (
            f"; the blocks up to {stop} see the whole sequence and run on all of it in a chunked decode: "
            "decode(codes, chunked=True, split=False) runs them per chunk instead (an approximation)"
        )
    elif start is None or start == first_stage(session.model.hparams):
        fit = suggest_chunk(session, limit, frames, codebooks=codebooks)
        hint = (
            f"; decode in chunks: decode(codes, chunked=True, chunk_size={fit})"
            if fit
            else "; even one frame per chunk does not fit"
        )
    raise ResourceError(
        f"decoding {frames} frames needs an estimated {need / 1e6:.1f} MB of compute memory, over the memory "
        f"budget of {limit / 1e6:.1f} MB{hint} (or raise memory_budget= / KZLAB_MEMORY_BUDGET)"
    )
