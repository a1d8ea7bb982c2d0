"""Read decoder files (GGUF, or a Hugging Face safetensors directory) into raw, memory-mapped tensors.

Nothing here knows the decoder: it only checks that the container is sound (magic, version, every tensor
inside the file) and hands back names, types, shapes and numpy views of the bytes. The checks exist
because gguf-py and ggml trust the header; a truncated download must give a Python error, not a crash.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.errors import InvalidModelError

#: the tensor types kzlab computes with (others are refused with a clear message)
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0")
GGUF_MAGIC = b"GGUF"


@dataclass
class RawTensor:
    """One tensor as stored: `data` has numpy shape `shape` (PyTorch order) for float types and raw bytes
    [rows, row_bytes] for block-quantized types."""

    name: str
    type: str
    shape: tuple[int, ...]
    data: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass
class RawFile:
    path: Path
    kind: str  # "gguf" or "safetensors"
    metadata: dict[str, Any]
    tensors: dict[str, RawTensor]
    file_size: int
    architecture: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def read(path: str | Path) -> RawFile:
    """Open a GGUF file or a Hugging Face checkpoint directory."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InvalidModelError(f"{p}: no such file or directory")
    if not p.is_dir() and not p.is_file():
        raise InvalidModelError(f"{p}: not a regular file; expected a .gguf file")
    if p.is_dir():
        if (p / "config.json").is_file() and list(p.glob("*.safetensors")):
            return read_hf_dir(p)
        raise InvalidModelError(
            f"{p}: is a directory; expected a .gguf file or a Hugging Face checkpoint directory "
            "(config.json + *.safetensors)"
        )
    if p.suffix == ".safetensors":
        return read_hf_dir(p.parent)
    return read_gguf(p)


def read_gguf(p: Path) -> RawFile:
    from kzlab.formats.prescan import prescan_gguf

    try:
        # every count, length and tensor extent bounded by the file size before gguf-py trusts them
        size = prescan_gguf(p).file_size
    except OSError as e:
        raise InvalidModelError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        from gguf import GGUFReader

        reader = GGUFReader(p, "r")
    except InvalidModelError:
        raise
    except Exception as e:  # gguf-py raises many kinds of errors on damaged headers
        raise InvalidModelError(f"{p}: damaged GGUF header: {type(e).__name__}: {e}") from None
    meta: dict[str, Any] = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            meta[key] = fld.contents()
        except Exception:  # a value gguf-py cannot decode is not needed by the decoder
            continue
    tensors: dict[str, RawTensor] = {}
    for t in reader.tensors:
        tname = t.tensor_type.name
        ne = [int(x) for x in t.shape]
        if any(n <= 0 for n in ne):
            raise InvalidModelError(f"{p}: tensor '{t.name}' has a non-positive dimension {ne}")
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise InvalidModelError(
                f"{p}: tensor '{t.name}' ends at byte {end} but the file has {size} bytes (truncated file?)"
            )
        if t.name in tensors:
            raise InvalidModelError(f"{p}: tensor name '{t.name}' appears twice")
        data = t.data
        shape = tuple(reversed(ne))
        if tname in ("F32", "F16"):
            data = data.reshape(shape)
        elif tname == "BF16":
            data = np.asarray(data).view(np.uint16).reshape(shape)
        tensors[t.name] = RawTensor(t.name, tname, shape, data)
    arch = meta.get("general.architecture")
    return RawFile(p, "gguf", meta, tensors, size, arch if isinstance(arch, str) else None)


_ST_TYPES = {"F32": ("F32", np.float32), "F16": ("F16", np.float16), "BF16": ("BF16", np.uint16)}


def config_metadata(cfg: dict[str, Any]) -> dict[str, Any]:
    """A Hugging Face config.json as metadata: the decoder's keys as `decoder.KEY`, the sample rate and model type
    (also used for a config.json embedded in a packed file, see kzlab.formats.layout's `config_from`)."""
    meta: dict[str, Any] = {}
    dec = cfg.get("decoder_config", cfg)
    if isinstance(dec, dict):
        for k, v in dec.items():
            if isinstance(v, (int, float, str, list)) and not k.startswith("_"):
                meta[f"decoder.{k}"] = v
    for k in ("output_sample_rate", "model_type"):
        if k in cfg:
            meta[k] = cfg[k]
    return meta


def read_hf_dir(d: Path) -> RawFile:
    """A Hugging Face checkpoint: config.json for metadata, every *.safetensors file memory-mapped."""
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise InvalidModelError(f"{d}/config.json: cannot read: {e}") from None
    meta = config_metadata(cfg)
    tensors: dict[str, RawTensor] = {}
    total = 0
    for f in sorted(d.glob("*.safetensors")):
        size = f.stat().st_size
        total += size
        with open(f, "rb") as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                raise InvalidModelError(f"{f}: too short for a safetensors file")
            n = struct.unpack("<Q", raw)[0]
            if n > size - 8 or n > 100_000_000:
                raise InvalidModelError(f"{f}: header length {n} does not fit the file ({size} bytes)")
            try:
                header = json.loads(fh.read(n))
            except ValueError as e:
                raise InvalidModelError(f"{f}: damaged safetensors header: {e}") from None
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = info.get("dtype")
            if dt not in _ST_TYPES:
                raise InvalidModelError(f"{f}: tensor '{name}' has dtype {dt}; kzlab reads F32, F16, BF16")
            gt, npdt = _ST_TYPES[dt]
            shape = tuple(int(x) for x in info["shape"])
            a, b = (int(x) for x in info["data_offsets"])
            if base + b > size or a > b:
                raise InvalidModelError(f"{f}: tensor '{name}' lies outside the file (truncated?)")
            arr = np.frombuffer(mm, dtype=npdt, count=(b - a) // np.dtype(npdt).itemsize, offset=base + a)
            tensors[name] = RawTensor(name, gt, shape, arr.reshape(shape))
    return RawFile(d, "safetensors", meta, tensors, total, cfg.get("model_type"), extra={"config": cfg})
