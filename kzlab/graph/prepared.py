"""Weights as the graph uses them: laid out and typed for one lowering.

A lowering decides which operand a weight is in a MUL_MAT and how it is laid out (im2col order, one
matrix per tap, col2im order), and ggml's CPU kernels only accept some type pairs (an F16 im2col wants an
F16 kernel; a kernel used as src1 must be F32 or match the vec-dot type). `prepare_weights` resolves all
of that in numpy, before ggml sees anything, so an impossible combination never reaches a GGML_ASSERT.
A weight whose stored layout and type are already the ones needed is passed through as the file's own
memory-mapped bytes, with no copy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kzlab.arch import arch_of
from kzlab.errors import InvalidOptionError
from kzlab.graph.fused import winograd
from kzlab.graph.options import KTAP, LoweringPlan
from kzlab.model.model import Model, Weight

QK8_0 = 32
SNAKE_EPS = 1e-9
#: roles no fused node reads (a family whose fused nodes read some names them: `Arch.fused_roles`)
NEVER = re.compile(r"(?!)")
NO_FUSED_ROLES = {"resunit_conv": NEVER, "block_convt": NEVER, "mlp_linear": NEVER}


@dataclass
class Prepared:
    """One tensor to create in the weight context: ggml type name, ne (ggml order) and its bytes."""

    name: str
    type: str
    ne: tuple[int, ...]
    data: np.ndarray
    role: str
    zero_copy: bool = False
    #: data holds F16 values that the upload widens to F32 on the way into the weight buffer (one pass, no
    #: F32 copy in between: F16 files under F32 lowerings load at about the speed of a plain copy)
    widen: bool = False
    #: a layout other than the lowering's usual one for this kind of weight ("taps": a conv with one output
    #: channel as ne [C_in, K], see GraphBuilder.conv1d; "snake-convt": a block's transposed conv for the fused
    #: node, see blocks.fused_snake_convt; "winograd": a conv as the matrices of Winograd's F(m, K) that a fused
    #: node reads, see kzlab.graph.fused.winograd)
    layout: str = ""
    #: computes the bytes when they are uploaded (`stored`), `data` being a placeholder of their type and size: a
    #: weight laid out anew is made one at a time, not all of them before the first upload (the peak memory of a
    #: load would otherwise hold every relaid weight twice)
    make: Callable[[], np.ndarray] | None = None
    #: the bytes are in the weight buffer and kzlab's own copy of them was dropped (`release`)
    released: bool = False

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) * (2 if self.widen else 1)

    def stored(self) -> np.ndarray:
        """The bytes as prepared, before any widening (made now for a lazy weight)."""
        if self.released:
            raise RuntimeError(f"weight {self.name}: its bytes were released after the upload")
        if self.make is None:
            return self.data
        v = self.make()
        if v.nbytes != self.data.nbytes or v.dtype != self.data.dtype:
            raise AssertionError(f"weight {self.name}: made {v.nbytes} bytes of {v.dtype} for a placeholder of "
                                 f"{self.data.nbytes} of {self.data.dtype}")
        return v

    def values(self) -> np.ndarray:
        """The bytes to upload, as an array of the final type (materializes a widened weight)."""
        v = self.stored()
        return v.astype(np.float32) if self.widen else v

    def release(self) -> None:
        """Drop kzlab's own copy of the bytes once they are in the weight buffer: a weight transposed or transformed
        at load (Winograd's matrices: 8/3 of a 3-tap conv) is otherwise held twice for the session's life; a view
        of the mapped file costs nothing to keep and is kept. Shape, type and size stay readable."""
        if self.make is not None or self.data.flags.owndata:
            self.data = np.broadcast_to(np.zeros((), self.data.dtype), self.data.shape)
            self.make = None
            self.released = True


def lazy(name: str, type_name: str, ne: tuple[int, ...], dtype: type, make: Callable[[], np.ndarray], role: str,
         widen: bool = False) -> Prepared:
    """A Prepared weight whose bytes (`dtype`, as many elements as `ne` holds) are made at upload by `make`."""
    placeholder = np.broadcast_to(np.zeros((), dtype), (int(np.prod(ne)),))
    return Prepared(name, type_name, ne, placeholder, role, widen=widen, make=make)


def encode(values: np.ndarray, type_name: str) -> np.ndarray:
    """float32 values (numpy order, last axis = ne0) as the bytes of a ggml type."""
    v = np.ascontiguousarray(values, dtype=np.float32)
    if type_name == "F32":
        return v
    if type_name == "F16":
        return v.astype(np.float16)
    if type_name == "BF16":
        u = v.view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return u.astype(np.uint16)
    if type_name == "Q8_0":
        from gguf import GGMLQuantizationType
        from gguf.quants import quantize

        rows = v.reshape(-1, v.shape[-1])
        return quantize(rows, GGMLQuantizationType.Q8_0)
    raise ValueError(f"cannot encode {type_name}")


def transpose(a: np.ndarray, block: int = 256) -> np.ndarray:
    """A contiguous copy of a 2-D array's transpose, `block` source rows at a time.

    numpy's one-shot transposing copy walks the source with a stride per element; in blocks each pass reads
    rows that stay in cache (about 4x faster on the largest transposed-conv weight, 1536 x 12288)."""
    out = np.empty((a.shape[1], a.shape[0]), dtype=a.dtype)
    for i in range(0, a.shape[0], block):
        out[:, i : i + block] = a[i : i + block].T
    return out


class _Family(NamedTuple):
    """What the weights' preparation asks the model's family: the roles its fused nodes read in their own layout,
    and the matrices it keeps F16 under Q8_0."""

    fused_roles: dict[str, re.Pattern]
    keeps_f16: Callable[[str], bool]


def _pick_type(w: Weight, wtype: str, ne0: int, identity_layout: bool, fam: _Family | None = None) -> str:
    """The type a src0 matrix weight gets, given the requested wtype and its row length."""
    if wtype == "native":
        if w.type == "Q8_0" and not (identity_layout and ne0 % QK8_0 == 0):
            return "Q8_0" if ne0 % QK8_0 == 0 else "F16"
        return w.type
    t = wtype.upper()
    if t == "Q8_0" and (ne0 % QK8_0 or (fam is not None and fam.keeps_f16(w.role))):
        return "F16"  # rows that are not whole Q8_0 blocks stay F16, and so do the sensitive matrices
    return t


def _matrix(name: str, w: Weight, values_fn, ne: tuple[int, ...], type_name: str, identity: bool) -> Prepared:
    """Build a Prepared tensor, reusing the file bytes when layout and type are unchanged."""
    if identity and type_name == w.type:
        return Prepared(name, type_name, ne, w.data, w.role, zero_copy=True)
    if identity and type_name == "F32" and w.type == "F16":
        return Prepared(name, type_name, ne, w.data, w.role, widen=True)
    if w.type in ("F16", "F32") and type_name in (w.type, "F32"):
        # a new layout in the stored type: move the stored values, no float32 round trip; F16 for an F32
        # lowering is moved as F16 (half the bytes) and widened on the way into the weight buffer
        widen = type_name != w.type

        def make() -> np.ndarray:
            return np.ascontiguousarray(values_fn(np.asarray(w.data).reshape(w.shape))).reshape(-1)

        return lazy(name, type_name, ne, np.float16 if w.type == "F16" else np.float32, make, w.role, widen=widen)
    # rows of ne[0] values, the tensor's row in ggml's order (a quantized type's blocks run along it), whatever
    # numpy shape values_fn keeps (an im2col kernel [C_out, C_in, K] is a [C_out, C_in * K] matrix)
    values = np.ascontiguousarray(values_fn(w.f32())).reshape(-1, ne[0])
    return Prepared(name, type_name, ne, encode(values, type_name), w.role)


def prepare_weights(model: Model, low: LoweringPlan) -> dict[str, Prepared]:
    """Every weight of the model, laid out and typed for `low`. Keys are the graph's weight names."""
    arch = arch_of(model.hparams)
    fam = _Family(getattr(arch, "fused_roles", NO_FUSED_ROLES), arch.keeps_f16_in_q8_0)
    out: dict[str, Prepared] = {}
    for role, w in model.weights.items():
        for p in _prepare_one(role, w, low, fam):
            out[p.name] = p
    packed = getattr(arch, "packed_weights", None)
    for name, values in (packed(model.weights, model.hparams, low) if packed else {}).items():
        v = np.ascontiguousarray(values, dtype=np.float32)
        out[name] = Prepared(name, "F32", tuple(reversed(v.shape)), v, name)
    derived = getattr(arch, "derived_weights", None)
    for name, values in (derived(model.hparams, low) if derived else {}).items():
        v = np.ascontiguousarray(values, dtype=np.float32)
        out[name] = Prepared(name, "F32", tuple(reversed(v.shape)), v, name)
    return out


def _prepare_one(role: str, w: Weight, low: LoweringPlan, fam: _Family) -> list[Prepared]:
    shape = w.shape
    if role.endswith(".codebook"):
        t = w.type if w.type in ("F32", "F16", "Q8_0") else "F32"
        return [_matrix(role, w, lambda a: a, (shape[1], shape[0]), t, True)]
    # a fused residual unit reads folded constants whatever the other snakes use
    folded = low.folded_snake or (low.fused_resunit and ".res." in role)
    if role.endswith("snake.alpha") or role.endswith("act1.alpha") or role.endswith("act2.alpha"):
        a = w.f32()
        return [Prepared(role, "F32", (shape[0],), np.exp(a) if folded else a, role)]
    if role.endswith(".beta"):
        b = w.f32()
        v = (1.0 / (np.exp(b) + SNAKE_EPS)).astype(np.float32) if folded else b
        return [Prepared(role, "F32", (shape[0],), v, role)]
    if len(shape) == 1:
        return [Prepared(role, "F32", (shape[0],), np.ascontiguousarray(w.f32()), role)]
    if role.endswith("dwconv.weight"):  # [C, 1, K] -> ne [C, K]: one column per tap
        C, _, K = shape
        return [Prepared(role, "F32", (C, K), np.ascontiguousarray(w.f32().reshape(C, K).T), role)]
    if role.endswith("convt.weight"):
        return [_prepare_convt(role, w, low, fam)]
    if low.fused_resunit and fam.fused_roles["resunit_conv"].search(role):
        # the fused residual unit's products read numpy [K, C_in, C_out] F32 matrices: ne [C_out, C_in, K]
        cout, cin, k = shape
        if low.winograd_unit and k > 1:
            # Winograd's F(4, 7): the 10 transformed matrices G w, numpy [10, C_in, C_out], ne [C_out, C_in, 10]
            if k != winograd.TAPS:
                raise InvalidOptionError(f"{role}: unitconv='winograd' computes convs of {winograd.TAPS} taps, this "
                                         f"one has {k}; use unitconv='direct'")
            return [_winograd(role, w, winograd.N)]
        return [_matrix(role, w, lambda a: a.transpose(2, 1, 0), (cout, cin, k), "F32", False)]
    if low.fused_normconv and fam.fused_roles.get("normconv_conv", NEVER).search(role):
        # the normalised conv's Winograd products: the transformed matrices G w, numpy [n, C_in, C_out], ne
        # [C_out, C_in, n], n = m + K - 1 (F(6, 3), F(4, 7))
        cout, cin, k = shape
        try:
            n = winograd.outputs(k) + k - 1
        except ValueError as e:
            raise InvalidOptionError(f"{role}: normconv='fused' cannot compute this conv ({e}); use "
                                     "normconv='ops'") from None
        return [_winograd(role, w, n)]
    if len(shape) == 3 and role.endswith(".weight"):
        return [_prepare_conv(role, w, low, fam)]
    # linear [out, in] -> ne [in, out]
    out_f, in_f = shape
    if low.fused_dwmlp and fam.fused_roles.get("mlp_linear", NEVER).search(role):
        # the fused ConvNeXt node's products read numpy [out, in] F32 matrices: the file's layout, widened
        return [_matrix(role, w, lambda a: a, (in_f, out_f), "F32", True)]
    t = _pick_type(w, low.wtype, in_f, True, fam)
    return [_matrix(role, w, lambda a: a, (in_f, out_f), t, True)]


def _winograd(role: str, w: Weight, n: int) -> Prepared:
    """A conv weight [C_out, C_in, K] as the n = m + K - 1 matrices G w of Winograd's F(m, K) (numpy [n, C_in, C_out]
    F32, ne [C_out, C_in, n]), made when uploaded."""
    cout, cin, _ = w.shape
    p = lazy(role, "F32", (cout, cin, n), np.float32, lambda: winograd.transform_weights(w.f32().transpose(2, 1, 0)),
             role)
    p.layout = "winograd"
    return p


def _prepare_conv(role: str, w: Weight, low: LoweringPlan, fam: _Family) -> Prepared:
    cout, cin, k = w.shape
    if cout == 1 and k > 1 and ((low.conv == "im2col-f32" and low.conv_src1 == "kernel")
                                or (low.conv in KTAP and low.conv_src1 == "data")):
        # one output channel (the waveform conv): the activation is src0, the K taps are the 2-D src1, ne [C_in, K]
        # (GraphBuilder._taps_conv); with the data as src1, K products of one output row would each be a
        # vector-dot pass over the whole input (ggml-blas takes no product of fewer than 32 rows)
        p = _matrix(role, w, lambda a: a[0].T, (cin, k), "F32", False)
        p.layout = "taps"
        return p
    if low.conv.startswith("im2col"):
        # ggml's own kernel layout [K, Cin, Cout] seen as a [K*Cin, Cout] matrix: the file's bytes
        if low.conv == "im2col-f16":
            t = "F16"  # the F16 columns set the vec-dot type: the kernel must match
        elif low.conv_src1 == "kernel":
            t = "F32"  # src1 must be F32 when the columns are F32
        else:
            t = _pick_type(w, low.wtype, k * cin, True, fam)
        return _matrix(role, w, lambda a: a, (k * cin, cout), t, True)
    # ktap: one [Cin, Cout] matrix per tap, ne [Cin, Cout, K]
    t = "F32" if low.conv_src1 == "kernel" else _pick_type(w, low.wtype, cin, k == 1, fam)
    return _matrix(role, w, lambda a: a.transpose(2, 0, 1), (cin, cout, k), t, k == 1)


def _prepare_convt(role: str, w: Weight, low: LoweringPlan, fam: _Family) -> Prepared:
    cin, cout, k = w.shape
    if low.fused_convt and fam.fused_roles["block_convt"].search(role):
        # the fused node's product reads numpy [C_in, K, C_out] F32: ne [C_out, K, C_in]
        p = _matrix(role, w, lambda a: a.transpose(0, 2, 1), (cout, k, cin), "F32", False)
        p.layout = "snake-convt"
        return p
    if low.convt == "direct":
        # ggml_conv_transpose_1d takes the file layout [K, Cout, Cin] in F16 or F32
        if low.wtype == "f32" or (low.wtype == "native" and w.type == "F32"):
            t = "F32"
        else:
            t = "F16"
        return _matrix(role, w, lambda a: a, (k, cout, cin), t, True)
    if low.convt == "shift":
        # every tap's [Cout, Cin] matrix stacked, tap-major: rows k*Cout + oc, ne [Cin, K*Cout]
        t = _pick_type(w, low.wtype, cin, False, fam)
        p = _matrix(role, w, lambda a: np.ascontiguousarray(a.transpose(2, 1, 0)).reshape(k * cout, cin),
                    (cin, k * cout), t, False)
        p.layout = "shift"
        return p
    # col2im: rows ordered oc*K + k, ne [Cin, Cout*K]: [Cin, Cout, K] seen as [Cin, Cout*K], transposed
    t = _pick_type(w, low.wtype, cin, False, fam)
    return _matrix(role, w, lambda a: transpose(a.reshape(cin, cout * k)), (cin, cout * k), t, False)
