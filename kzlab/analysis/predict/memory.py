"""Memory per backend of a placement: its weights plus the compute buffer ggml's allocator would reserve for the
nodes placed on it, against the backend's budget.

The compute buffers are measured, not guessed: ggml's graph allocator (`ggml_gallocr_reserve_n_size`, the
call the scheduler's reserve makes) is run on the real graph with every node given the buffer of the backend
the placement put it on, so tensors whose lives do not overlap share memory exactly as they would on the
device. The allocator needs one buffer type per backend; a device kzlab does not have (Hexagon) is stood for
by a copy of the CPU buffer type (same alignment, no size limit, `ggml_nbytes` per tensor), which is what a
host-visible device buffer type reports. Weights are not in the compute buffers (the scheduler never
allocates pre-allocated tensors); each backend's split input copies are added at their full size, an upper
bound (the scheduler allocates them with the split's graph, where they may share memory with its nodes).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from ggml import ggml as g

from kzlab.analysis.predict.parameters import Parameter
from kzlab.errors import ResourceError

#: bytes copied from the CPU buffer type to stand for another one (more than the struct: iface, device, context)
BUFT_BYTES = 256


@dataclass
class BackendMemory:
    """One backend's memory: weights + compute buffer (+ split input copies) against its budget."""

    backend: str
    weights_bytes: int
    compute_bytes: int
    copies_bytes: int
    budget_bytes: int | None
    budget_source: str = ""
    largest: list[dict[str, Any]] = field(default_factory=list)  # the largest tensors placed here
    #: backends whose buffer type this one shares (BLAS and the CPU): one compute buffer, counted once, here
    shared_with: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.compute_bytes + self.copies_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.budget_bytes is None else self.total_bytes <= self.budget_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights_bytes,
            "compute_bytes": self.compute_bytes,
            "copies_bytes": self.copies_bytes,
            "total_bytes": self.total_bytes,
            "budget_bytes": self.budget_bytes,
            "budget_source": self.budget_source,
            "fits": self.fits,
            "largest": list(self.largest),
            "shared_with": list(self.shared_with),
        }

    def verdict(self) -> str:
        mb = self.total_bytes / 1e6
        head = (f"{self.backend}: {mb:.1f} MB (weights {self.weights_bytes / 1e6:.1f}, compute "
                f"{self.compute_bytes / 1e6:.1f}, input copies {self.copies_bytes / 1e6:.1f})")
        if self.budget_bytes is None:
            return head + ", no budget stated"
        word = "fits" if self.fits else "DOES NOT FIT"
        return head + f" {word} in {self.budget_bytes / 1e6:.0f} MB [{self.budget_source}]"


def _ptr(x) -> int:
    return int(ctypes.cast(x, ctypes.c_void_p).value or 0)


def _cpu_buffer_type() -> int:
    """ggml_backend_cpu_buffer_type() as a full-width address (the bindings declare its result an `int`, which
    ctypes reads as a 32-bit C int)."""
    fn = ctypes.CFUNCTYPE(ctypes.c_void_p)(_ptr(g.lib.ggml_backend_cpu_buffer_type))
    return int(fn())


def compute_bytes_by_buffer(gf, node_ids: list[int], n_leafs: int, n_buffers: int, keep: list) -> list[int]:
    """ggml_gallocr_reserve_n_size on `gf` with node i in buffer node_ids[i] and every leaf not yet allocated (the
    graph's inputs) in buffer 0, the CPU's; n_buffers distinct buffer types. `n_leafs` bounds the graph's leaf
    count (the bindings do not expose the graph's leaf list)."""
    cpu = _cpu_buffer_type()
    bufts = [cpu]
    for _ in range(1, n_buffers):  # distinct objects: the allocator merges buffers of the same buffer type
        raw = ctypes.create_string_buffer(BUFT_BYTES)
        ctypes.memmove(raw, cpu, BUFT_BYTES)
        keep.append(raw)
        bufts.append(ctypes.addressof(raw))
    arr = (ctypes.c_void_p * n_buffers)(*bufts)
    alloc = g.ggml_gallocr_new_n(arr, n_buffers)
    if not alloc:
        raise ResourceError("could not create a ggml graph allocator to measure the compute buffers")
    try:
        nodes = (ctypes.c_int * max(1, len(node_ids)))(*node_ids)
        leafs = (ctypes.c_int * max(1, n_leafs))()  # zeros: the CPU's buffer
        sizes = (ctypes.c_size_t * n_buffers)()
        g.ggml_gallocr_reserve_n_size(alloc, gf, nodes, leafs, sizes)
        return [int(s) for s in sizes]
    finally:
        g.ggml_gallocr_free(alloc)


def placement_memory(
    gf,
    weight_tensors: dict[str, Any],
    weights_on: str,
    node_backend: list[str],
    backends: list[str],
    copies: dict[str, int],
    budgets: dict[str, Parameter | None],
    buffer_of: dict[str, str] | None = None,
) -> dict[str, BackendMemory]:
    """Memory of each backend for the graph `gf` whose i-th node runs on node_backend[i].

    `buffer_of` maps a backend to its buffer type's identity: backends of one buffer type share one compute
    buffer, as in the scheduler (BLAS and the CPU). The weights (pre-allocated in the real run) are marked as
    allocated for the measurement and left as they were afterwards; every other leaf (the graph's inputs) is in
    the CPU's buffer (the last backend's)."""
    from kzlab.analysis.placement.sched import graph_tensors

    buffer_of = buffer_of or {b: b for b in backends}
    order = list(dict.fromkeys([buffer_of[backends[-1]], *(buffer_of[b] for b in backends[:-1])]))
    index = {b: order.index(buffer_of[b]) for b in backends}  # the CPU's buffer first: the inputs go there
    node_ids = [index[b] for b in node_backend]
    weights = list(weight_tensors.values())
    saved = [(t, t.contents.data) for t in weights]
    keep: list = []
    for t in weights:
        if not t.contents.data:
            t.contents.data = ctypes.c_void_p(1)  # "already allocated" for the allocator; never dereferenced
    try:
        n_leafs = 2 * len(graph_tensors(gf)[1]) + 64
        sizes = compute_bytes_by_buffer(gf, node_ids, n_leafs, len(order), keep)
    finally:
        for t, d in saved:
            t.contents.data = d
    w_bytes = sum(int(g.ggml_nbytes(t)) for t in weights)
    out = {}
    counted: set[int] = set()
    for b in backends:
        i = index[b]
        shared = [o for o in backends if o != b and index[o] == i]
        placed = [(int(g.ggml_nbytes(g.ggml_graph_node(gf, k))), k) for k, nb in enumerate(node_backend) if nb == b]
        placed.sort(reverse=True)
        largest = [
            {"name": g.ggml_graph_node(gf, k).contents.name.decode(errors="replace"), "bytes": nbytes}
            for nbytes, k in placed[:5]
        ]
        budget = budgets.get(b)
        out[b] = BackendMemory(
            b,
            w_bytes if b == weights_on else 0,
            sizes[i] if i not in counted else 0,
            int(copies.get(b, 0)),
            int(budget.value) if budget is not None else None,
            budget.source if budget is not None else "",
            largest,
            shared,
        )
        counted.add(i)
    return out
