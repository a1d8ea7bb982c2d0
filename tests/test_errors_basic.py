"""Wrong or missing tensors, bad files and bad codes give clear kzlab errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY
from gguf import GGUFReader, GGUFWriter

import kzlab
from kzlab.errors import InvalidInputError, InvalidModelError, LayoutError
from kzlab.loader import load_model


def rewrite(src, dst, drop=(), reshape=None):
    """Copy a GGUF, dropping tensors or replacing one with a wrongly shaped array."""
    r = GGUFReader(src)
    w = GGUFWriter(str(dst), r.fields["general.architecture"].contents())
    for t in r.tensors:
        if t.name in drop:
            continue
        a = np.array(t.data)
        if reshape and t.name == reshape:
            a = np.zeros((a.shape[0] + 1,) + a.shape[1:], a.dtype)
        w.add_tensor(t.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def test_missing_tensor_is_named(tmp_path):
    f = rewrite(TINY / "qwentts-tokenizer-f32.gguf", tmp_path / "m.gguf", drop={"tok_dec.dec.3.res.1.conv1.weight"})
    with pytest.raises(InvalidModelError, match=r"dec\.3\.res\.1\.conv1\.weight"):
        load_model(f)


def test_wrong_shape_is_named(tmp_path):
    f = rewrite(TINY / "qwentts-tokenizer-f32.gguf", tmp_path / "s.gguf", reshape="tok_dec.dec.2.res.0.conv2.weight")
    with pytest.raises(InvalidModelError, match=r"tok_dec\.dec\.2\.res\.0\.conv2\.weight.*shape"):
        load_model(f)


def test_not_gguf_and_missing(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"hello")
    with pytest.raises(InvalidModelError, match="not a GGUF"):
        load_model(tmp_path / "x.gguf")
    with pytest.raises(InvalidModelError, match="no such file"):
        load_model(tmp_path / "nope.gguf")
    with pytest.raises(InvalidModelError, match="directory"):
        load_model(tmp_path)


def test_unknown_layout_name():
    with pytest.raises(LayoutError, match="unknown layout"):
        load_model(TINY / "qwentts-tokenizer-f32.gguf", layout="nonesuch")


@pytest.mark.parametrize(
    "codes,match",
    [
        (np.zeros((15, 4), np.int32), "shape"),
        (np.zeros((16, 0), np.int32), "no frames"),
        (-np.ones((16, 4), np.int32), ">= 0"),
        (np.full((16, 4), 64, np.int32), "out of range"),
        (np.zeros((16, 4), np.float32), "integer"),
        ("abc", "integer"),
    ],
)
def test_bad_codes(codes, match):
    with kzlab.load(TINY / "qwentts-tokenizer-f32.gguf") as d:
        with pytest.raises(InvalidInputError, match=match):
            d.decode(codes)
        assert d.decode(np.zeros((16, 3), np.int32)).shape == (3 * 1920,)
