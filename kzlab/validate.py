"""Checks that run before gguf-py or ggml see a file, a set of hyperparameters or a graph.

gguf-py and ggml trust what they are given: a crafted count in a GGUF header makes gguf-py build huge
arrays or fail with an arbitrary exception, and a graph that does not fit in memory makes ggml abort (or
the machine swap) while allocating. In a notebook either kills the kernel, so kzlab checks here first and
raises a `KzlabError` that names the file, tensor or value and says what was expected.

- `prescan_gguf` walks the GGUF header with `struct`, bounding every count, length, type and tensor extent
  by the file size, before `GGUFReader` opens the file.
- `check_hparams` refuses hyperparameters the graph builders cannot honour (zero heads, odd RoPE widths...).
- `estimate_compute_bytes` / `check_budget` measure a graph's compute buffer with ggml's own allocator in
  size-only mode (nothing is allocated) and refuse graphs above the memory budget.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.errors import InvalidModelError, InvalidOptionError, ResourceError

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
#: nested arrays deeper than this are refused (gguf-py recurses; real files use at most 1 level)
MAX_ARRAY_DEPTH = 2

# GGUF value types: id -> (name, fixed size in bytes or None for string/array)
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("UINT8", 1),
    1: ("INT8", 1),
    2: ("UINT16", 2),
    3: ("INT16", 2),
    4: ("UINT32", 4),
    5: ("INT32", 4),
    6: ("FLOAT32", 4),
    7: ("BOOL", 1),
    10: ("UINT64", 8),
    11: ("INT64", 8),
    12: ("FLOAT64", 8),
}
_STRING, _ARRAY = 8, 9


@dataclass
class KVInfo:
    """One metadata entry as laid out in the file (offsets let tests aim mutations at fields)."""

    key: str
    offset: int  # where the key's length field starts
    type_offset: int
    value_type: int
    value_offset: int
    end: int


@dataclass
class TensorInfo:
    """One tensor-info record, with its extent in the data section checked against the file size."""

    name: str
    offset: int  # where the name's length field starts
    dims: tuple[int, ...]  # ggml order (ne0 first)
    type_id: int
    type_name: str
    data_offset: int  # relative to the data section
    nbytes: int
    end: int  # end of this record in the header


@dataclass
class GGUFHeader:
    """The parsed, bounds-checked header of a GGUF file."""

    path: Path
    file_size: int
    version: int
    n_tensors: int
    n_kv: int
    alignment: int
    data_start: int
    kvs: list[KVInfo] = field(default_factory=list)
    tensors: list[TensorInfo] = field(default_factory=list)


class _Cursor:
    """A bounds-checked little-endian reader over the mapped file: every read that would pass the end of
    the file raises InvalidModelError saying what was being read."""

    def __init__(self, buf: Any, size: int, path: Path):
        self.buf, self.size, self.path, self.pos = buf, size, path, 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise InvalidModelError(
                f"{self.path}: {what} at byte {self.pos} needs {n} bytes but the file ends at {self.size} "
                "(truncated or damaged file?)"
            )

    def unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"length of {what}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidModelError(f"{self.path}: {what} at byte {self.pos - n} is not valid UTF-8") from None

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n


def _quant_sizes() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, elements per block, bytes per block), from gguf-py's table."""
    from gguf.constants import GGML_QUANT_SIZES

    return {int(t): (t.name, int(bs), int(ts)) for t, (bs, ts) in GGML_QUANT_SIZES.items()}


def _skip_value(c: _Cursor, vtype: int, what: str, depth: int = 0) -> Any:
    """Step over one value, returning it when it is a scalar or string (alignment needs the value)."""
    if vtype in _SCALARS:
        name, n = _SCALARS[vtype]
        fmt = {"UINT8": "<B", "INT8": "<b", "UINT16": "<H", "INT16": "<h", "UINT32": "<I", "INT32": "<i"}.get(name)
        fmt = fmt or {"FLOAT32": "<f", "BOOL": "<B", "UINT64": "<Q", "INT64": "<q", "FLOAT64": "<d"}[name]
        return c.unpack(fmt, what)
    if vtype == _STRING:
        return c.string(what)
    if vtype == _ARRAY:
        if depth >= MAX_ARRAY_DEPTH:
            raise InvalidModelError(f"{c.path}: {what} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
        etype = c.unpack("<I", f"element type of {what}")
        count = c.unpack("<Q", f"element count of {what}")
        if etype in _SCALARS:
            c.skip(count * _SCALARS[etype][1], f"{count} elements of {what}")
            return None
        if etype not in (_STRING, _ARRAY):
            raise InvalidModelError(f"{c.path}: {what} has unknown element type {etype}")
        # every string or array element takes at least 8 bytes: bound the count before looping
        c.need(count * 8, f"{count} elements of {what}")
        for i in range(count):
            _skip_value(c, etype, f"element {i} of {what}", depth + 1)
        return None
    raise InvalidModelError(f"{c.path}: {what} has unknown value type {vtype}")


def prescan_gguf(path: str | Path) -> GGUFHeader:
    """Parse and bounds-check a GGUF header without trusting any count in it.

    Raises InvalidModelError naming the file and the field when the magic, version, a count, a length, a
    type, the alignment or a tensor's extent is impossible for a file of this size.
    """
    p = Path(path)
    size = p.stat().st_size
    if size < 24:
        with open(p, "rb") as f:
            head = f.read(8)
        if head[:4] != GGUF_MAGIC:
            raise InvalidModelError(f"{p}: not a GGUF file (magic {head[:4]!r}, expected b'GGUF')")
        raise InvalidModelError(f"{p}: truncated GGUF header ({size} bytes; the fixed header alone is 24)")
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return _prescan(p, mm, size)


def _prescan(p: Path, mm: Any, size: int) -> GGUFHeader:
    c = _Cursor(mm, size, p)
    magic = bytes(mm[:4])
    if magic != GGUF_MAGIC:
        raise InvalidModelError(f"{p}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    c.pos = 4
    version = c.unpack("<I", "GGUF version")
    if version not in GGUF_VERSIONS:
        raise InvalidModelError(f"{p}: GGUF version {version} is not supported (2 or 3)")
    n_tensors = c.unpack("<Q", "tensor count")
    n_kv = c.unpack("<Q", "metadata count")
    # smallest records: kv = key length + type + 1-byte value; tensor info = name length + n_dims + type + offset
    if n_kv * 13 > size - c.pos:
        raise InvalidModelError(f"{p}: header claims {n_kv} metadata entries; a {size}-byte file cannot hold them")
    if n_tensors * 24 > size - c.pos:
        raise InvalidModelError(f"{p}: header claims {n_tensors} tensors; a {size}-byte file cannot hold them")
    hdr = GGUFHeader(p, size, version, n_tensors, n_kv, GGUF_DEFAULT_ALIGNMENT, 0)
    keys: set[str] = set()
    for i in range(n_kv):
        start = c.pos
        key = c.string(f"key of metadata entry {i}")
        if key in keys:
            raise InvalidModelError(f"{p}: metadata key {key!r} appears twice")
        keys.add(key)
        t_off = c.pos
        vtype = c.unpack("<I", f"value type of {key!r}")
        v_off = c.pos
        value = _skip_value(c, vtype, f"value of {key!r}")
        if key == "general.alignment":
            if vtype != 4:
                raise InvalidModelError(f"{p}: general.alignment must be a UINT32; got value type {vtype}")
            if value < 1 or value & (value - 1) or value > 1 << 20:
                raise InvalidModelError(f"{p}: general.alignment = {value}; expected a power of two <= 1 MiB")
            hdr.alignment = int(value)
        hdr.kvs.append(KVInfo(key, start, t_off, vtype, v_off, c.pos))
    qs = _quant_sizes()
    names: set[str] = set()
    for i in range(n_tensors):
        start = c.pos
        name = c.string(f"name of tensor {i}")
        if name in names:
            raise InvalidModelError(f"{p}: tensor name {name!r} appears twice")
        names.add(name)
        n_dims = c.unpack("<I", f"dimension count of tensor {name!r}")
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise InvalidModelError(f"{p}: tensor {name!r} has {n_dims} dimensions; expected 1..{GGML_MAX_DIMS}")
        dims = tuple(c.unpack("<Q", f"dimension {d} of tensor {name!r}") for d in range(n_dims))
        type_id = c.unpack("<I", f"type of tensor {name!r}")
        data_offset = c.unpack("<Q", f"data offset of tensor {name!r}")
        if type_id not in qs:
            raise InvalidModelError(f"{p}: tensor {name!r} has unknown ggml type id {type_id}")
        tname, block, tsize = qs[type_id]
        if any(d < 1 for d in dims):
            raise InvalidModelError(f"{p}: tensor {name!r} has a zero dimension {list(dims)}")
        if dims[0] % block:
            raise InvalidModelError(
                f"{p}: tensor {name!r} is {tname} (blocks of {block}) but its rows have {dims[0]} elements"
            )
        n_el = math.prod(dims)
        nbytes = n_el // block * tsize
        if nbytes > size:  # also catches products far beyond int64, before any arithmetic downstream
            raise InvalidModelError(
                f"{p}: tensor {name!r} {list(dims)} {tname} needs {nbytes} bytes; the whole file has only {size} "
                "(truncated or damaged file?)"
            )
        hdr.tensors.append(TensorInfo(name, start, dims, type_id, tname, data_offset, nbytes, c.pos))
    a = hdr.alignment
    hdr.data_start = (c.pos + a - 1) // a * a
    for t in hdr.tensors:
        if t.data_offset % a:
            raise InvalidModelError(
                f"{p}: tensor {t.name!r} data offset {t.data_offset} is not a multiple of the alignment {a}"
            )
        end = hdr.data_start + t.data_offset + t.nbytes
        if end > size:
            raise InvalidModelError(
                f"{p}: tensor {t.name!r} ends at byte {end} but the file has {size} bytes (truncated file?)"
            )
    return hdr


# ---- hyperparameters ----------------------------------------------------------------------------------------
def check_hparams(hp: Any, src: str) -> None:
    """Refuse hyperparameters the graph builders would turn into a ggml assertion or a useless graph."""
    ints = {
        "codebook_size": hp.codebook_size,
        "semantic_codebook_size": hp.semantic_codebook_size,
        "vq_dim": hp.vq_dim,
        "codebook_dim": hp.codebook_dim,
        "num_quantizers": hp.num_quantizers,
        "latent_dim": hp.latent_dim,
        "hidden_size": hp.hidden_size,
        "intermediate_size": hp.intermediate_size,
        "num_layers": hp.num_layers,
        "num_heads": hp.num_heads,
        "num_kv_heads": hp.num_kv_heads,
        "head_dim": hp.head_dim,
        "sliding_window": hp.sliding_window,
        "decoder_dim": hp.decoder_dim,
        "sample_rate": hp.sample_rate,
    }
    for name, v in ints.items():
        if not isinstance(v, int) or v < 1:
            raise InvalidModelError(f"{src}: hyperparameter {name} = {v!r}; expected an integer >= 1")
    for name in ("rope_theta", "rms_norm_eps"):
        v = getattr(hp, name)
        if not isinstance(v, float) or not math.isfinite(v) or v <= 0:
            raise InvalidModelError(f"{src}: hyperparameter {name} = {v!r}; expected a finite number > 0")
    if hp.head_dim % 2:
        raise InvalidModelError(f"{src}: head_dim = {hp.head_dim}; RoPE needs an even head width")
    if hp.num_heads % hp.num_kv_heads:
        raise InvalidModelError(
            f"{src}: {hp.num_heads} attention heads cannot share {hp.num_kv_heads} key/value heads evenly"
        )
    if not hp.upsample_rates or any(r < 1 for r in (*hp.upsample_rates, *hp.upsampling_ratios)):
        raise InvalidModelError(
            f"{src}: upsampling factors {list(hp.upsampling_ratios)} / {list(hp.upsample_rates)}; expected >= 1"
        )
    if hp.decoder_dim % 2 ** len(hp.upsample_rates):
        raise InvalidModelError(
            f"{src}: decoder_dim = {hp.decoder_dim} cannot be halved {len(hp.upsample_rates)} times (one per block)"
        )


# ---- memory budget -------------------------------------------------------------------------------------------
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


def estimate_compute_bytes(session: Any, frames: int, start: str = "quantizer", stages: bool = False) -> int:
    """Build the graph for `frames` on the session's weights (no allocation) and measure its compute buffer."""
    from ggml import ggml as g

    from kzlab.graph.blocks import build_decoder
    from kzlab.graph.builder import GraphBuilder

    wt = session._ensure_weights()
    b = GraphBuilder(wt, session.lowering, keep_stages=stages)
    try:
        gf = b.finish(build_decoder(b, session.model.hparams, frames, start))
        buft = g.ggml_backend_get_default_buffer_type(session.backends.primary.handle)
        return graph_compute_bytes(gf, buft)
    finally:
        b.free()


def count_nonfinite(type_name: str, data: Any) -> int:
    """NaN/Inf values in stored weights, read from the raw bytes for every supported type (for Q8_0 the
    per-block F16 scales: a non-finite scale poisons its whole block)."""
    import numpy as np

    a = np.ascontiguousarray(data).reshape(-1)
    if type_name == "Q8_0":
        a = a.view(np.uint8).reshape(-1, 34)[:, :2].copy().reshape(-1).view(np.float16)
        type_name = "F16"
    # an exponent of all ones is Inf or NaN: tested on the bits, in slices (np.isfinite widens F16 to F32
    # and allocates a mask of the whole tensor; this is several times faster on a 100M-parameter file)
    bits = {"F32": (np.uint32, 0x7F800000), "F16": (np.uint16, 0x7C00), "BF16": (np.uint16, 0x7F80)}
    if type_name not in bits:
        return 0
    utype, mask = bits[type_name]
    u = a.view(utype)
    step = 1 << 20
    return sum(int(np.count_nonzero((u[i : i + step] & mask) == mask)) for i in range(0, u.size, step))


def suggest_chunk(session: Any, budget: int, frames: int, left_context: int = 25, start: str = "quantizer") -> int:
    """The largest chunk_size (frames, before `left_context`) whose graph fits `budget`; 0 if none does."""
    lo, hi = 0, frames
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_compute_bytes(session, mid + left_context, start) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_session_budget(session: Any, frames: int, start: str, budget: Any = None, stages: bool = False) -> None:
    """Refuse, before any allocation, a graph whose compute buffer would exceed the memory budget.

    Shapes the session already allocated passed this check before; they are not measured again.
    """
    if (start, frames, stages) in getattr(session, "_graphs", {}):
        return
    limit = memory_budget(budget)
    need = estimate_compute_bytes(session, frames, start, stages)
    if need <= limit:
        return
    hint = ""
    if start == "quantizer":
        fit = suggest_chunk(session, limit, frames)
        hint = (
            f"; decode in chunks: decode(codes, chunked=True, chunk_size={fit})"
            if fit
            else "; even one frame per chunk does not fit"
        )
    raise ResourceError(
        f"decoding {frames} frames needs an estimated {need / 1e6:.1f} MB of compute memory, over the memory "
        f"budget of {limit / 1e6:.1f} MB{hint} (or raise memory_budget= / KZLAB_MEMORY_BUDGET)"
    )


#: indexed role families: (prefix, first index, the role whose presence defines the count, metadata words,
#: what the metadata count adds, parts of role names that only blocks of the family have)
_FAMILIES = (
    ("vq.rest", 0, "codebook", ("num_quantizers", "n_quantizers", "num_codebooks"), 1, (".codebook",)),
    ("tfm.blk", 0, "attn_q.weight", ("num_hidden_layers", "n_layers", "num_layers"), 0, (".attn_", ".ffn_")),
    ("up", 0, "convt.weight", ("upsampling_ratios",), 0, (".convt.", ".dwconv.", ".pw1.", ".pw2.")),
    ("dec", 1, "convt.weight", ("upsample_rates",), 0, (".convt.", ".res.")),  # dec.N+1 is the final snake
)


def check_counts(hp: Any, meta: dict[str, Any], roles_present: set[str], src: str) -> None:
    """Name the tensor that is missing when a repeated block lost its defining tensor.

    Hyperparameters count blocks by probing indices 0, 1, 2... until one is absent, so a missing tensor
    otherwise shows up as a decoder with fewer blocks (and, with later blocks present, as unrelated
    "extra" tensors). A later index in the file, or a count in the metadata, shows what was meant.
    """
    from kzlab.model.hparams import _pick

    counts = {
        "vq.rest": hp.num_quantizers - 1,
        "tfm.blk": hp.num_layers,
        "up": len(hp.upsampling_ratios),
        "dec": len(hp.upsample_rates),
    }
    for prefix, first, key, words, offset, parts in _FAMILIES:
        n = counts[prefix]
        missing = f"{prefix}.{first + n}.{key}"
        later = sorted(
            r
            for r in roles_present
            if r.startswith(prefix + ".") and _index(r, prefix) >= first + n and any(q in r for q in parts)
        )
        if later:
            raise InvalidModelError(
                f"{src}: required tensor for role '{missing}' is missing (the file has '{later[0]}' after it)"
            )
        stated = _pick(meta, words)
        if isinstance(stated, list):
            stated = len(stated)
        if isinstance(stated, (int, float)) and not isinstance(stated, bool) and int(stated) != n + offset:
            raise InvalidModelError(
                f"{src}: the metadata says {int(stated)} for {words[0]} but the tensors give {n + offset}: "
                f"required tensor for role '{missing}' is missing"
                if int(stated) > n + offset
                else f"{src}: the metadata says {int(stated)} for {words[0]} but the file has {n + offset}"
            )


def _index(role: str, prefix: str) -> int:
    """The block index in `prefix.N.rest` (-1 when there is none)."""
    part = role[len(prefix) + 1 :].split(".", 1)[0]
    return int(part) if part.isdigit() else -1
