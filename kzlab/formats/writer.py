"""Write a decoder as a GGUF file in its family's own layout (so the file also runs with that family's
reference runtime: qwentts.cpp for the Qwen3-TTS 12 Hz decoder, llama.cpp for WavTokenizer).

Used by `kzlab convert` (any readable decoder -> GGUF) and `kzlab synth` (synthetic decoders). What a family's
files call their tensors, their shapes, stored types and metadata is the family's files half
(`kzlab.formats.family_files`); this module only writes. The file is written to a temporary name beside the
target and renamed at the end: an interrupted write never leaves a truncated GGUF under the requested name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.errors import InvalidOptionError
from kzlab.formats.family_files import files_half

OUTTYPES = ("f32", "f16", "q8_0")


def _check_outtype(outtype: str) -> None:
    if outtype not in OUTTYPES:
        raise InvalidOptionError(f"outtype {outtype!r}: expected one of {', '.join(OUTTYPES)}")


def storage_type(role: str, shape: tuple[int, ...], outtype: str, hp: Any = None) -> str:
    """The stored type of one tensor (role, shape as the file holds it) in a file of `outtype`, as the
    family's converter decides it (default family: the first registered)."""
    _check_outtype(outtype)
    from kzlab.arch import family_names

    return files_half(hp if hp is not None else family_names()[0]).storage_type(role, tuple(shape), outtype)


def _add_value(w, key: str, v: object) -> None:
    if isinstance(v, bool):
        w.add_bool(key, v)
    elif isinstance(v, int):
        w.add_uint32(key, v)
    elif isinstance(v, float):
        w.add_float32(key, v)
    elif isinstance(v, str):
        w.add_string(key, v)
    elif isinstance(v, list):
        w.add_array(key, v)
    else:
        raise InvalidOptionError(f"metadata {key!r}: cannot store a {type(v).__name__}")


def write_gguf(
    path: str | Path,
    hp: Any,
    tensors: Iterable[tuple[str, Callable[[], np.ndarray]]],
    outtype: str = "f32",
    name: str | None = None,
    extra_metadata: dict[str, object] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write canonical tensors (role, float32 producer in PyTorch order) as a GGUF in the layout of the family
    `hp` belongs to, atomically."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    _check_outtype(outtype)
    fh = files_half(hp)
    out = Path(path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".part", dir=out.parent)
    os.close(fd)
    try:
        # a family whose files differ with the decoder (one layout for codes, another for latents) says which
        lay = fh.layout_for(hp) if hasattr(fh, "layout_for") else fh
        w = GGUFWriter(tmp, getattr(lay, "architecture", fh.ARCHITECTURE))
        w.add_name(name or fh.DEFAULT_NAME)
        n_params = 0
        for role, produce in tensors:
            a = lay.file_array(role, np.ascontiguousarray(produce(), dtype=np.float32))
            t = lay.storage_type(role, a.shape, outtype)
            n_params += a.size
            gname = lay.tensor_name(role)
            if t == "F32":
                w.add_tensor(gname, a)
            elif t == "F16":
                w.add_tensor(gname, a.astype(np.float16))
            else:
                q = quantize(a.reshape(-1, a.shape[-1]), GGMLQuantizationType.Q8_0)
                w.add_tensor(gname, q.reshape(*a.shape[:-1], -1), raw_dtype=GGMLQuantizationType.Q8_0)
            if progress:
                progress(role)
        # the key-value section is written before the tensors, whatever order they were added in; the metadata
        # comes last here because a family may state the parameter count (llama.cpp's size label)
        for k, v in {**fh.metadata(hp, outtype, n_params), **(extra_metadata or {})}.items():
            _add_value(w, k, v)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


__all__ = ["OUTTYPES", "storage_type", "write_gguf"]
