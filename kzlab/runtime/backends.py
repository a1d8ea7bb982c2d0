"""Backends by name, and the two ways kzlab computes a graph with them.

Names (resolved by `kzlab.runtime.spec`): `cpu`, `blas` (ggml's BLAS backend: MUL_MAT only, so it always
runs under the scheduler with the CPU), `rpc://HOST:PORT` (a remote ggml server, e.g. `kzlab rpc-server` or
llama.cpp's `rpc-server`), and any other device the ggml build registered (CUDA, Vulkan, Metal...), found
through the backend registry and never assumed.

Plain mode computes the whole graph on one backend with its own graph allocator; scheduler mode hands the
graph to `ggml_backend_sched` over an ordered list of backends (CPU last), whose node assignment kzlab
reads back afterwards.
"""

from __future__ import annotations

import ctypes
import socket
from dataclasses import dataclass, field
from typing import Any

from ggml import ggml as g

from kzlab.errors import BackendError, InvalidOptionError
from kzlab.runtime.devices import available_backends, registered_devices
from kzlab.runtime.ffi import sched_tensor_backend, tensor_address
from kzlab.runtime.spec import BackendSpec, ResolvedBackends, parse_rpc

SCHED_GRAPH_SIZE = 32768


def check_reachable(host: str, port: int, timeout: float = 3.0) -> None:
    """Fail fast (and cleanly) when nothing listens at the RPC address; ggml would block or abort."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise BackendError(f"RPC server rpc://{host}:{port} is not reachable: {e}") from None


@dataclass
class Backend:
    name: str  # kzlab's name: cpu, blas, rpc://..., cuda0 ...
    handle: Any
    device: Any = None

    @property
    def ggml_name(self) -> str:
        return g.ggml_backend_name(self.handle).decode()


def _init_device(dev_name: str) -> Backend:
    dev = g.ggml_backend_dev_by_name(dev_name.encode())
    if not dev:
        raise BackendError(f"backend {dev_name!r} is not in this ggml build ({', '.join(available_backends())})")
    h = g.ggml_backend_dev_init(dev, None)
    if not h:
        raise BackendError(f"backend {dev_name!r} could not be initialised")
    return Backend(dev_name.lower(), h, dev)


def init_backend(name: str, threads: int) -> Backend:
    n = name.strip()
    low = n.lower()
    if low == "cpu":
        b = _init_device("CPU")
        g.ggml_backend_cpu_set_n_threads(b.handle, threads)
        return Backend("cpu", b.handle, b.device)
    if low == "blas":
        b = _init_device("BLAS")
        g.ggml_backend_blas_set_n_threads(b.handle, threads)
        return Backend("blas", b.handle, b.device)
    if low.startswith("rpc"):
        host, port = parse_rpc(n)
        check_reachable(host, port)
        h = g.ggml_backend_rpc_init(f"{host}:{port}".encode(), 0)
        if not h:
            raise BackendError(f"could not connect a ggml RPC backend to {host}:{port}")
        return Backend(f"rpc://{host}:{port}", h, g.ggml_backend_get_device(h))
    for d in registered_devices():
        if d["name"].lower() == low:
            return _init_device(d["name"])
    raise InvalidOptionError(f"unknown backend {name!r}: available here: {', '.join(available_backends())}")


@dataclass
class BackendSet:
    """The backends of one session and how graphs are run on them."""

    backends: list[Backend]
    resolved: ResolvedBackends
    weights_index: int = 0
    sched: Any = None
    _keep: list = field(default_factory=list)
    _current: Any = None  # the graph the scheduler holds allocated now

    @property
    def use_sched(self) -> bool:
        return self.resolved.sched

    @property
    def op_offload(self) -> bool:
        return self.resolved.op_offload

    @property
    def threads(self) -> int:
        return self.resolved.threads

    @property
    def primary(self) -> Backend:
        return self.backends[0]

    @property
    def weights_backend(self) -> Backend:
        return self.backends[self.weights_index]

    @property
    def weights_buft(self):
        return g.ggml_backend_get_default_buffer_type(self.weights_backend.handle)

    @property
    def weights_name(self) -> str:
        return self.weights_backend.name

    def describe(self) -> str:
        """What runs: `cpu`, `sched[blas+cpu]` (the resolved label)."""
        return self.resolved.label

    def cpu(self) -> Backend | None:
        return next((b for b in self.backends if b.name == "cpu"), None)

    def set_abort_callback(self, cb) -> None:
        self._keep.append(cb)
        c = self.cpu()
        if c is not None:
            g.ggml_backend_cpu_set_abort_callback(c.handle, cb, None)

    # ---- allocation and compute ----------------------------------------------------------------------------
    def new_sched(self) -> None:
        """A fresh scheduler over these backends (any previous one freed): it reads GGML_SCHED_DEBUG now, which is
        how a caller captures the scheduler's own log of a graph."""
        if self.sched is not None:
            g.ggml_backend_sched_free(self.sched)
            self.sched = None
        n = len(self.backends)
        arr = (g.ggml_backend_t_ctypes * n)(*[b.handle for b in self.backends])
        self._keep.append(arr)
        self.sched = g.ggml_backend_sched_new(arr, None, n, SCHED_GRAPH_SIZE, False, self.op_offload)
        if not self.sched:
            raise BackendError(f"could not create a scheduler over {self.describe()}")

    def ensure_sched(self) -> None:
        """The scheduler, created if there is none yet."""
        if self.sched is None:
            self.new_sched()

    _new_sched = new_sched  # the name before it was public

    def allocate(self, bg) -> None:
        if self.use_sched:
            if self.sched is None:
                self.new_sched()
            sources_of(bg)  # record the graph's own sources before the scheduler rewires any of them
            if self._current is not None:
                restore_sources(self._current)
                self._current = None
            restore_sources(bg)
            if not g.ggml_backend_sched_reserve(self.sched, bg.gf):
                raise BackendError(f"the scheduler could not reserve memory for this graph on {self.describe()}")
            restore_sources(bg)
            return
        alloc = g.ggml_gallocr_new(g.ggml_backend_get_default_buffer_type(self.primary.handle))
        if not g.ggml_gallocr_alloc_graph(alloc, bg.gf):
            g.ggml_gallocr_free(alloc)
            raise BackendError(f"could not allocate the compute buffer on {self.describe()}")
        bg.allocator = alloc
        bg.compute_bytes = int(g.ggml_gallocr_get_buffer_size(alloc, 0))

    def prepare(self, bg) -> None:
        """Make `bg`'s tensors live before inputs are set.

        The scheduler splits a graph by rewriting node sources in place (a source on another backend is
        replaced by a copy that lives in the scheduler's own context). Splitting an already split graph
        again therefore reads stale copies: with an RPC backend every copied input then aliases one buffer
        and the decode is garbage. So a graph is split once per allocation, from its recorded original
        sources, and kept allocated across runs until another graph takes the scheduler.
        """
        if not self.use_sched or self._current is bg:
            return
        g.ggml_backend_sched_reset(self.sched)
        if self._current is not None:
            restore_sources(self._current)
            self._current = None
        restore_sources(bg)
        detach_compute_tensors(bg)
        if not g.ggml_backend_sched_alloc_graph(self.sched, bg.gf):
            raise BackendError(f"the scheduler could not allocate this graph on {self.describe()}")
        self._current = bg
        bg.compute_bytes = sum(int(g.ggml_backend_sched_get_buffer_size(self.sched, b.handle)) for b in self.backends)

    def invalidate(self) -> None:
        """Call after using `self.sched` directly (reset, alloc of another graph): the next run re-splits."""
        if self._current is not None:
            restore_sources(self._current)
            self._current = None

    def compute(self, bg) -> int:
        if self.use_sched:
            self.prepare(bg)
            return int(g.ggml_backend_sched_graph_compute(self.sched, bg.gf))
        return int(g.ggml_backend_graph_compute(self.primary.handle, bg.gf))

    def by_handle(self, handle: int | None) -> Backend | None:
        """The Backend whose ggml handle is `handle` (as returned by the scheduler), or None."""
        return next((b for b in self.backends if handle and _addr(b.handle) == handle), None)

    def node_backends(self, bg) -> list[str]:
        """kzlab's backend name for every node of `bg`, read from the scheduler (plain mode: the one backend)."""
        if not self.use_sched:
            return [self.primary.name] * int(g.ggml_graph_n_nodes(bg.gf))
        self.prepare(bg)
        out = []
        for node in bg.nodes():
            b = self.by_handle(sched_tensor_backend(self.sched, node))
            out.append(b.name if b else "")
        return out

    def n_splits(self, bg) -> int:
        """The scheduler's own split count for `bg` (1 in plain mode)."""
        if not self.use_sched:
            return 1
        self.prepare(bg)
        return int(g.ggml_backend_sched_get_n_splits(self.sched))

    def release(self, bg) -> None:
        if self.use_sched and self._current is bg:
            g.ggml_backend_sched_reset(self.sched)
            self._current = None
            restore_sources(bg)
        if bg.allocator is not None:
            g.ggml_gallocr_free(bg.allocator)
            bg.allocator = None

    def free(self) -> None:
        if self.sched is not None:
            g.ggml_backend_sched_free(self.sched)
            self.sched = None
        for b in self.backends:
            if b.handle:
                g.ggml_backend_free(b.handle)
                b.handle = None
        self.backends = []


def open_backends(spec: BackendSpec | ResolvedBackends | str | list[str] = "auto", **kw) -> BackendSet:
    """Open the backends of a spec (resolved first when it is a request; loose keywords make a BackendSpec)."""
    if isinstance(spec, ResolvedBackends):
        if kw:
            raise InvalidOptionError("open_backends: a resolved spec takes no further options")
        rb = spec
    elif isinstance(spec, BackendSpec):
        rb = BackendSpec.from_kw(spec, **kw).resolve()
    else:
        rb = BackendSpec.from_kw(backend=spec, **kw).resolve()
    opened: list[Backend] = []
    try:
        for n in rb.names:
            opened.append(init_backend(n, rb.threads))
    except BaseException:
        for b in opened:
            g.ggml_backend_free(b.handle)
        raise
    return BackendSet(opened, rb, rb.names.index(rb.weights_on))


def as_ctypes_backend(b: Backend) -> ctypes.c_void_p:
    return b.handle


def _addr(h) -> int:
    return h if isinstance(h, int) else (ctypes.cast(h, ctypes.c_void_p).value or 0)


def sources_of(bg) -> list[tuple[Any, tuple[int, ...]]]:
    """Every node of `bg.gf` with the addresses of its sources as built (recorded once, before any split).

    Addresses, not ctypes pointer objects: an item read from a ctypes array shares the array's memory, so a
    saved pointer object would silently follow the scheduler's rewiring.
    """
    snap = bg.extra.get("sources")
    if snap is None:
        snap = []
        for i in range(int(g.ggml_graph_n_nodes(bg.gf))):
            node = g.ggml_graph_node(bg.gf, i)
            srcs = tuple(tensor_address(node.contents.src[j]) for j in range(g.GGML_MAX_SRC))
            snap.append((node, srcs))
        bg.extra["sources"] = snap
    return snap


def detach_compute_tensors(bg) -> None:
    """Forget where a previous scheduler allocation put `bg`'s tensors (weights stay where they are).

    ggml's allocators treat a tensor that already has data as pre-allocated and leave it alone; after another
    graph took the scheduler, that data points into a compute buffer that may have been reallocated since.
    """
    weights = g.GGML_BACKEND_BUFFER_USAGE_WEIGHTS
    ctx = bg.builder.ctx
    t = g.ggml_get_first_tensor(ctx)
    while t:
        c = t.contents
        if c.buffer and int(g.ggml_backend_buffer_get_usage(c.buffer)) != weights:
            c.data = None
            c.buffer = None
        t = g.ggml_get_next_tensor(ctx, t)


def restore_sources(bg) -> None:
    """Undo the scheduler's in-place source rewiring (see BackendSet.prepare)."""
    ptr = ctypes.POINTER(g.ggml_tensor)
    for node, srcs in sources_of(bg):
        arr = node.contents.src
        for j, a in enumerate(srcs):
            if a and tensor_address(arr[j]) != a:
                arr[j] = ctypes.cast(a, ptr)


_PROBE = (ctypes.c_char * 4)()


def wait_computed(t) -> None:
    """Return once `t` is computed. ggml's compute and synchronize are enough for an in-process backend, but an
    RPC backend computes asynchronously (its synchronize returns at once): reading 4 bytes of the result is the
    only way to know the server has finished. Host buffers need nothing."""
    buf = t.contents.buffer
    if buf and not g.ggml_backend_buffer_is_host(buf):
        g.ggml_backend_tensor_get(t, ctypes.cast(_PROBE, ctypes.c_void_p), 0, 4)
