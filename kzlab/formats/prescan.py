"""The GGUF prescan: a bounds-checked walk of a GGUF header before gguf-py opens the file.

gguf-py trusts what it is given: a crafted count in a GGUF header makes it build huge arrays or fail with an
arbitrary exception, which in a notebook can take the kernel down. `prescan_gguf` walks the header with
`struct`, bounding every count, length, type and tensor extent by the file size, and raises an
`InvalidModelError` that names the file and the field.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.errors import InvalidModelError

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
class TensorRecord:
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
    tensors: list[TensorRecord] = field(default_factory=list)


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
        hdr.tensors.append(TensorRecord(name, start, dims, type_id, tname, data_offset, nbytes, c.pos))
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
