"""The products' floor of one streaming call: the call's products, back to back, with nothing between them.

A K-frame streaming call is a ggml graph whose time goes to its products (matrix products, and the convs computed
as products) and to everything else: elementwise ops, the state's copies in and out, norms, the attention, the
scheduler, the host's work around the graph. How far a call sits above its products says how much of it is
overhead that could shrink, and how close it is to what this CPU's BLAS can do for those shapes at all. So the
floor here is not a model: it is the same products, timed on the same machine in the same process as the call.

What is run, per K (`ProductsFloor`):

- every node of the call's graph whose op is a product (`PRODUCT_OPS`), each the graph's own node (its shapes,
  types, strides and memory, its weights where they are) on the backend the scheduler gave it (ggml-cpu's kernels
  or the BLAS backend), in the graph's order;
- for each of kzlab's fused nodes, the products its numpy kernel ran in one real call of the same graph, recorded
  call by call (operands, strides, `out=`) on each of ggml's threads, and replayed by a node of their own on the
  CPU backend with the same thread count, each ggml thread its recorded share with numpy's BLAS on one thread, as
  the fused kernel runs them (`kzlab.graph.fused.threads`); no snake, bias, residual or join between them.

Consecutive items on one backend are one graph, computed with one `ggml_backend_graph_compute` on the session's
compute thread (the call's own OpenMP pool and BLAS settings), so the floor pays the thread wake-ups and barriers the
products need and nothing else; only the computes are timed. FLASH_ATTN_EXT is left out: its products cannot be run
without its softmax (under 1 % of a 4-frame call), so the floor is the lower for it and the ratio a call keeps to it
the stricter. The recording swaps numpy for a recorder in the fused kernels' modules for one call: nothing else may
run fused kernels in the process meanwhile.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
import time
from typing import Any

import numpy as np
from ggml import ggml as g

from kzlab.analysis.flops import TensorInfo, op_flops
from kzlab.graph.fused import kernels as fused_kernels
from kzlab.graph.fused import winograd as fused_winograd
from kzlab.graph.fused.threads import blas_one_thread

#: ggml ops that are products (a matrix product, or a conv computed directly as products)
PRODUCT_OPS = frozenset({"MUL_MAT", "MUL_MAT_ID", "OUT_PROD", "CONV_TRANSPOSE_1D", "CONV_TRANSPOSE_2D", "CONV_2D",
                         "CONV_3D"})

Product = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]  # (a, b, out) of one np.matmul call


class _Recorder:
    """numpy as the fused kernels' modules see it while one call is recorded: everything is numpy's, but every
    `matmul` is also noted with its operands and calling thread (the products a fused node runs depend on its
    thread split, tiles and row counts: recording them is how the floor gets exactly those)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        r = np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
        with self._lock:
            self.calls.append((threading.get_ident(), a, b, out))
        return r


def _address(a: np.ndarray) -> int:
    """Where an operand's first element lies: what tells which node's weight (or output) a product read."""
    return int(a.__array_interface__["data"][0])


def _tensor_range(t) -> tuple[int, int] | None:
    """The bytes a ggml tensor occupies (None before it is allocated)."""
    data = t.contents.data
    if not data:
        return None
    lo = ctypes.cast(data, ctypes.c_void_p).value or 0
    return lo, lo + int(g.ggml_nbytes(t))


def _op(node) -> str:
    """A node's op as ggml names it (MUL_MAT, CUSTOM, ...)."""
    return g.ggml_op_name(int(node.contents.op)).decode()


def _info(t) -> TensorInfo:
    """A tensor as the op table (kzlab.analysis.flops) reads it, to count a product node's FLOPs as profiles do."""
    return TensorInfo(tuple(int(t.contents.ne[i]) for i in range(4)), "", int(g.ggml_nbytes(t)))


def _matmul_flops(a: np.ndarray, b: np.ndarray) -> int:
    """2 M K N (times the batch) of one recorded np.matmul."""
    batch = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))) if max(a.ndim, b.ndim) > 2 else 1
    m = a.shape[-2] if a.ndim > 1 else 1
    return 2 * m * a.shape[-1] * (b.shape[-1] if b.ndim > 1 else 1) * batch


# the replayed fused products, by the userdata of their node; the C callback below reads them
_REPLAY: dict[int, list[list[Product]]] = {}
_REPLAY_ERRORS: list[BaseException] = []
_REPLAY_RUNS: dict[int, int] = {}  # runs of each replay node: a node ggml skipped would make the floor too low


def _replay_kernel(dst, ith: int, nth: int, userdata) -> None:
    """One replay node on ggml thread `ith`: that thread's recorded products of one fused node, back to back."""
    try:
        key = int(userdata or 0)
        shares = _REPLAY[key]
        if ith == 0:
            _REPLAY_RUNS[key] = _REPLAY_RUNS.get(key, 0) + 1
        mine = [p for j, share in enumerate(shares) if j % nth == ith for p in share]
        if mine:
            blas_one_thread()  # as the fused kernels run their products: each ggml thread its own, BLAS on one
        for a, b, out in mine:
            if out is None:
                np.matmul(a, b)
            else:
                np.matmul(a, b, out=out)
    except BaseException as e:  # it cannot cross ggml's C frames: raised once the compute returns
        _REPLAY_ERRORS.append(e)


_REPLAY_CB = g.ggml_custom_op_t(_replay_kernel)  # module-level: the C pointer must outlive every graph
_REPLAY_NEXT = [1]


class ProductsFloor:
    """The products of one K-frame streaming call of `dec` (a local, stateful stream), ready to be timed back to
    back (`time_ms`). Built once per K, after the call's graph was built (`Stream.prepare`): one call of that graph
    is run here to record its fused nodes' products."""

    def __init__(self, dec: Any, k: int, codes: np.ndarray):
        self.dec, self.k = dec, k
        sess = dec.session
        if not hasattr(sess, "on_compute_thread"):
            raise RuntimeError("the products' floor needs a decoder in this process (not a worker session)")
        self.session = sess
        self.bg = sess.graph(k, stream=True)
        with sess.lock:
            names = sess.backends.node_backends(self.bg)
        nodes = self.bg.nodes()
        recorded = self._record(codes[:, :k], nodes)
        # the items in graph order: (backend name, tensor to compute); consecutive ones on one backend: one graph
        items: list[tuple[str, Any]] = []
        self.n_nodes = self.n_fused_products = 0
        self.keys: list[int] = []
        #: per node of the call that the floor runs products of: (its name, "ggml" or "fused", the products' FLOPs)
        self.per_node: list[tuple[str, str, int]] = []
        self.n_fused = sum(1 for shares in recorded.values() if shares)
        # the replay nodes' own context (a tensor each, no data) and, once the runs are known, the graphs'
        self.ctx = g.ggml_init(g.ggml_init_params(mem_size=g.ggml_tensor_overhead() * (self.n_fused + 8),
                                                  mem_buffer=None, no_alloc=True))
        self.graph_ctx = None
        for i, node in enumerate(nodes):
            op = _op(node)
            if op in PRODUCT_OPS:
                srcs = [node.contents.src[j] for j in range(g.GGML_MAX_SRC)]
                flops = op_flops(op, _info(node), [_info(s) if s else None for s in srcs])
                self.per_node.append((node.contents.name.decode(), "ggml", flops))
                items.append((names[i], node))
                self.n_nodes += 1
            elif recorded.get(i):
                key = _REPLAY_NEXT[0]
                _REPLAY_NEXT[0] += 1
                _REPLAY[key] = recorded[i]
                self.keys.append(key)
                t = g.ggml_custom_4d(self.ctx, g.GGML_TYPE_F32, 1, 1, 1, 1, None, 0, _REPLAY_CB, -1, key)
                items.append(("cpu", t))
                self.n_fused_products += sum(len(share) for share in recorded[i])
                flops = sum(_matmul_flops(a, b) for share in recorded[i] for a, b, _ in share)
                self.per_node.append((node.contents.name.decode(), "fused", flops))
        self.flops = sum(f for *_, f in self.per_node)
        runs: list[tuple[str, list[Any]]] = []
        for name, t in items:
            if runs and runs[-1][0] == name:
                runs[-1][1].append(t)
            else:
                runs.append((name, [t]))
        size = sum(g.ggml_graph_overhead_custom(len(r) + 1, False) for _, r in runs) + (1 << 12)
        self.graph_ctx = g.ggml_init(g.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=True))
        handles = {b.name: b.handle for b in sess.backends.backends}
        self.segments: list[tuple[Any, Any]] = []
        for name, r in runs:
            gf = g.ggml_new_graph_custom(self.graph_ctx, len(r) + 1, False)
            for t in r:
                if t.contents.flags & g.GGML_TENSOR_FLAG_COMPUTE:  # the call's own node, computed as it was built
                    g.ggml_graph_add_node(gf, t)
                else:  # a replay node (it has no sources): added, and marked for computing, as any new node
                    g.ggml_build_forward_expand(gf, t)
            self.segments.append((handles[name], gf))

    def _record(self, codes: np.ndarray, nodes: list) -> dict[int, list[list[Product]]]:
        """One call of the graph with the fused kernels' products recorded; each product given to the fused node
        whose source or output holds one of its operands (the weight, mostly), else to the node of the product
        before it on the same thread. Returns, per node index, its products as one list per ggml thread."""
        spans: list[tuple[int, int, int]] = []
        for i, node in enumerate(nodes):
            if _op(node) != "CUSTOM":
                continue
            for t in [node] + [node.contents.src[j] for j in range(g.GGML_MAX_SRC) if node.contents.src[j]]:
                r = _tensor_range(t)
                if r is not None:
                    spans.append((r[0], r[1], i))
        spans.sort()
        starts = [s[0] for s in spans]

        def owner(a: np.ndarray) -> int | None:
            at = _address(a)
            j = bisect.bisect_right(starts, at) - 1
            while j >= 0 and spans[j][0] <= at:  # the spans may overlap (a weight read by two nodes)
                if at < spans[j][1]:
                    return spans[j][2]
                j -= 1
            return None

        rec = _Recorder()
        saved = fused_kernels.np, fused_winograd.np
        fused_kernels.np = fused_winograd.np = rec  # type: ignore[assignment]
        try:
            s = self.dec.stream()
            s.push(codes)
        finally:
            fused_kernels.np, fused_winograd.np = saved
        out: dict[int, dict[int, list[Product]]] = {}
        last: dict[int, int] = {}
        pending: dict[int, list[Product]] = {}
        for ident, a, b, o in rec.calls:
            node = next((n for n in (owner(b), owner(a), owner(o) if o is not None else None) if n is not None),
                        last.get(ident))
            if node is None:  # nothing before it on this thread: it goes with the next product that is placed
                pending.setdefault(ident, []).append((a, b, o))
                continue
            last[ident] = node
            share = out.setdefault(node, {}).setdefault(ident, [])
            share.extend(pending.pop(ident, []))
            share.append((a, b, o))
        if pending:
            raise RuntimeError(f"{sum(map(len, pending.values()))} recorded products of no fused node")
        return {i: list(by_thread.values()) for i, by_thread in out.items()}

    def _run_once(self) -> float:
        """One run of every product, in seconds: the computes alone, not the hand-over to the compute thread."""
        t0 = time.perf_counter()
        for handle, gf in self.segments:
            status = int(g.ggml_backend_graph_compute(handle, gf))
            if status != g.GGML_STATUS_SUCCESS:
                raise RuntimeError(f"the products' floor: graph compute failed (status {status})")
        return time.perf_counter() - t0

    def time_ms(self, reps: int) -> list[float]:
        """`reps` runs of every product back to back, in ms each, on the session's compute thread (where the call's
        own graphs run: the same OpenMP pool, the same BLAS threads)."""
        sess = self.session
        before = {key: _REPLAY_RUNS.get(key, 0) for key in self.keys}
        with sess.lock:
            sess.backends.prepare(self.bg)  # the graph's tensors live where its nodes compute them
            times, _ = sess.on_compute_thread(lambda: [self._run_once() for _ in range(reps)])
        if _REPLAY_ERRORS:
            err = _REPLAY_ERRORS[0]
            _REPLAY_ERRORS.clear()
            raise RuntimeError(f"the products' floor: a replayed product failed: {err!r}") from err
        skipped = [key for key in self.keys if _REPLAY_RUNS.get(key, 0) - before[key] != reps]
        if skipped:
            raise RuntimeError(f"the products' floor: {len(skipped)} fused nodes' products did not run {reps} times")
        return [t * 1e3 for t in times]

    def describe(self) -> dict[str, Any]:
        """What the floor runs: its ggml product nodes, the fused nodes replayed and their products, the GFLOP."""
        return {"product_nodes": self.n_nodes, "fused_nodes": self.n_fused,
                "fused_products": self.n_fused_products, "gflop": self.flops / 1e9, "graphs": len(self.segments)}

    def close(self) -> None:
        for key in self.keys:
            _REPLAY.pop(key, None)
            _REPLAY_RUNS.pop(key, None)
        self.keys = []
        self.segments = []
        for ctx in (self.ctx, self.graph_ctx):
            if ctx:
                g.ggml_free(ctx)
        self.ctx = self.graph_ctx = None
