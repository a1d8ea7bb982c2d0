"""Check the simulator against the real ggml_backend_sched, on backends this machine has (BLAS, RPC).

One freshly built graph is handed to both: the simulator reads it (with the real buffers of the real
weights), then the real scheduler splits and allocates it once, and ggml_backend_sched_get_tensor_backend
gives its assignment of every node. The graph must be fresh because the real split rewrites node srcs
into its input copies, which a second split would then see.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field

from ggml import ggml as g

from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.capabilities import BufferType
from kzlab.analysis.placement.graph import build
from kzlab.analysis.placement.sched import SimBackend, Simulator, graph_tensors, real_buffers
from kzlab.analysis.predict.schedlog import sched_debug
from kzlab.graph.options import Lowering
from kzlab.model.model import Model
from kzlab.runtime.session import Session


@dataclass
class Comparison:
    backends: list[str]
    n_nodes: int
    n_equal: int
    n_splits_sim: int
    n_splits_real: int
    mismatches: list[tuple[str, str, str]] = field(default_factory=list)  # (node, simulated, real)
    real_counts: dict[str, int] = field(default_factory=dict)  # nodes per backend in the real assignment
    simulated: list[str] = field(default_factory=list)  # the simulated backend of every node, in graph order
    split_inputs_sim: list[tuple[str, list[str]]] = field(default_factory=list)  # (backend, copied input names)
    split_inputs_real: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.n_equal == self.n_nodes and self.n_splits_sim == self.n_splits_real


def _ptr(x) -> int:
    return int(ctypes.cast(x, ctypes.c_void_p).value or 0)


# ggml-python 0.0.45 declares this function's result as a Python `int`, which ctypes reads as a C int:
# the backend pointer comes back truncated to 32 bits. Call the same symbol with a pointer result instead.
_get_tensor_backend = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    _ptr(g.lib.ggml_backend_sched_get_tensor_backend)
)


def real_backend(sched, t) -> int:
    """ggml_backend_sched_get_tensor_backend(sched, t) as a full-width pointer (0 when unassigned)."""
    return int(_get_tensor_backend(_ptr(sched), _ptr(t)) or 0)


def _profile_for(name: str) -> str:
    """The capability profile of a backend kzlab names: an RPC server's, a CUDA device's (cuda0, cuda1...), or its
    own name (cpu, blas)."""
    if name.startswith("rpc://"):
        return "rpc"
    return "cuda" if name.lower().startswith("cuda") else name


SPLIT_RX = re.compile(r"## SPLIT #(\d+): (\S+) # (\d+) inputs(?:: )?(.*)")
INPUT_RX = re.compile(r"\[(.*?) \((.{5})\)\] ")


def parse_splits(text: str) -> list[tuple[str, list[str]]]:
    """[(backend name as ggml prints it, [input tensor names])] from the scheduler's split printout."""
    out = []
    for line in text.splitlines():
        m = SPLIT_RX.match(line.strip())
        if m:
            names = [x.group(1) for x in INPUT_RX.finditer(m.group(4) + " ")]
            if len(names) != int(m.group(3)):
                raise ValueError(f"could not parse the inputs of: {line!r}")
            out.append((m.group(2), names))
    return out


def compare(model: Model, lowering: Lowering, backend: list[str], frames: int, op_offload: bool = True) -> Comparison:
    """Simulated vs real assignment of every node for one lowering on `backend` (a sched list, CPU last)."""
    s = Session(model, lowering, backend=backend, sched=True, op_offload=op_offload, threads=1)
    try:
        wt = s.ensure_weights()
        bs = s.backends
        bufts: dict[int, BufferType] = {}
        sims = []
        for b in bs.backends:
            prof = capabilities.load(_profile_for(b.name))
            bt = g.ggml_backend_get_default_buffer_type(b.handle)
            key = _ptr(bt)
            bufts.setdefault(
                key,
                BufferType(
                    g.ggml_backend_buft_name(bt).decode(), prof.buffer.kind, bool(g.ggml_backend_buft_is_host(bt))
                ),
            )
            sims.append(SimBackend(b.name, prof, bufts[key]))
        gr = build(model, s.plan, frames, weights=wt)
        try:
            nodes, leafs = graph_tensors(gr.gf)
            sim = Simulator(gr.gf, sims, real_buffers(nodes + leafs, bufts), op_offload)
            res = sim.run()
            with sched_debug(level=1) as log:
                bs.ensure_sched()
                g.ggml_backend_sched_reset(bs.sched)
                if not g.ggml_backend_sched_alloc_graph(bs.sched, gr.gf):
                    raise RuntimeError("the real scheduler could not allocate the graph")
            handles = {_ptr(b.handle): i for i, b in enumerate(bs.backends)}
            out = Comparison(
                [b.name for b in bs.backends],
                len(nodes),
                0,
                len(res.splits),
                int(g.ggml_backend_sched_get_n_splits(bs.sched)),
            )
            out.simulated = [sims[b].name for b in res.node_backend]
            gname = {i: g.ggml_backend_name(b.handle).decode() for i, b in enumerate(bs.backends)}
            out.split_inputs_sim = [(gname[sp.backend], [sim.info[a].name for a in sp.inputs]) for sp in res.splits]
            out.split_inputs_real = parse_splits("".join(log))
            for t, simb in zip(nodes, res.node_backend, strict=True):
                real = handles.get(real_backend(bs.sched, t), -1)
                rname = sims[real].name if real >= 0 else "none"
                out.real_counts[rname] = out.real_counts.get(rname, 0) + 1
                if real == simb:
                    out.n_equal += 1
                else:
                    out.mismatches.append(
                        (t.contents.name.decode(), sims[simb].name, sims[real].name if real >= 0 else "none")
                    )
            g.ggml_backend_sched_reset(bs.sched)
            return out
        finally:
            gr.builder.free()
    finally:
        s.close()


def session_assignment(model: Model, lowering: Lowering, backend: list[str], frames: int) -> tuple[list[str], int]:
    """The real assignment through kzlab's own path (Session.graph reserves, prepare allocates), and n_splits."""
    s = Session(model, lowering, backend=backend, sched=True, threads=1)
    try:
        bg = s.graph(frames)
        s.backends.prepare(bg)
        names = {_ptr(b.handle): b.name for b in s.backends.backends}
        real = [names.get(real_backend(s.backends.sched, t), "none") for t in bg.nodes()]
        return real, int(g.ggml_backend_sched_get_n_splits(s.backends.sched))
    finally:
        s.close()
