"""Named supports_op conditions, transcribed from the ggml backends' C sources.

A capability profile (devices/*.toml) lists, per op, the names of the rules below; a rule looks at the
real ggml tensor of the node (type, ne, nb, contiguity, srcs) and returns None when the backend would
accept it or a short reason when it would refuse it. Buffers are not read from the tensor: the simulator
tells the rule which (possibly hypothetical) buffer kind a tensor lives in, so that a profile can be
evaluated for a backend this machine does not have.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, Protocol

from ggml import ggml as g

F32, F16, BF16, I32 = g.GGML_TYPE_F32, g.GGML_TYPE_F16, g.GGML_TYPE_BF16, g.GGML_TYPE_I32
QUANT_HEX = {g.GGML_TYPE_Q4_0, g.GGML_TYPE_Q4_1, g.GGML_TYPE_Q8_0, g.GGML_TYPE_IQ4_NL, g.GGML_TYPE_MXFP4}


class Env(Protocol):
    """What a rule may ask the simulator: the buffer kind a tensor is in (None: not allocated yet)."""

    def buffer_kind(self, t) -> str | None: ...


Rule = Callable[[Any, Env, Any], "str | None"]
RULES: dict[str, Rule] = {}
#: kernel-path rules: (tensor, env, arg) -> the path a node the backend runs takes ("hmx", "hvx", ...)
PathRule = Callable[[Any, Env, Any], str]
PATHS: dict[str, PathRule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return deco


def path_rule(name: str) -> Callable[[PathRule], PathRule]:
    def deco(fn: PathRule) -> PathRule:
        PATHS[name] = fn
        return fn

    return deco


def options_of(env: Env) -> dict:
    """The backend's run-time options the profile states (e.g. hmx: GGML_HEXAGON_USE_HMX), {} when none."""
    return getattr(env, "options", None) or {}


def kernel_path_of(env: Env, t) -> str:
    """The kernel path the profile's path rule gives a node ("" when it names none)."""
    fn = getattr(env, "kernel_path", None)
    return fn(t) if fn is not None else ""


def src(t, i: int):
    p = t.contents.src[i]
    return p if p else None


def tname(ty: int) -> str:
    return g.ggml_type_name(ty).decode()


def ne(t) -> list[int]:
    return [int(t.contents.ne[i]) for i in range(4)]


def nrows(t) -> int:
    return int(g.ggml_nrows(t))


# ---- generic -------------------------------------------------------------------------------------------------
@rule("never")
def never(t, env: Env, arg) -> str | None:
    return str(arg or "not in the backend's supports_op switch")


@rule("own_buffers")
def own_buffers(t, env: Env, arg) -> str | None:
    """ggml_hexagon_supported_buffers: dst and every src that has a buffer must be in one of ours."""
    kinds = set(arg if isinstance(arg, list) else [arg])
    for x in [t] + [src(t, i) for i in range(g.GGML_MAX_SRC)]:
        if x is None:
            continue
        k = env.buffer_kind(x)
        if k is not None and k not in kinds:
            return f"{x.contents.name.decode()} is in a {k} buffer, not {'/'.join(sorted(kinds))}"
    return None


# ---- CPU (ggml-cpu.cpp ggml_backend_cpu_device_supports_op) ------------------------------------------------
@rule("cpu_mul_mat")
def cpu_mul_mat(t, env: Env, arg) -> str | None:
    s0, s1 = src(t, 0), src(t, 1)
    vdt = g.ggml_get_type_traits_cpu(s0.contents.type).contents.vec_dot_type
    if s1.contents.type == F32 or s1.contents.type == vdt:
        return None
    return f"src1 {tname(s1.contents.type)} is neither F32 nor the vec_dot type of {tname(s0.contents.type)}"


# ---- BLAS (ggml-blas.cpp ggml_backend_blas_device_supports_op) ----------------------------------------------
def has_to_float(ty: int) -> bool:
    return ty == F32 or bool(g.ggml_get_type_traits(ty).contents.to_float)


@rule("blas_mul_mat")
def blas_mul_mat(t, env: Env, arg) -> str | None:
    s0, s1 = src(t, 0), src(t, 1)
    min_batch = int(arg or 32)
    if not g.ggml_is_contiguous(s0):
        return "src0 not contiguous"
    if not g.ggml_is_contiguous(s1):
        return "src1 not contiguous"
    if s1.contents.type != F32:
        return f"src1 {tname(s1.contents.type)} (needs F32)"
    dims = {"ne0": int(t.contents.ne[0]), "ne1": int(t.contents.ne[1]), "ne10": int(s1.contents.ne[0])}
    small = [f"{k}={v}" for k, v in dims.items() if v < min_batch]
    if small:
        return f"{', '.join(small)} < {min_batch}"
    if not has_to_float(s0.contents.type):
        return f"src0 {tname(s0.contents.type)} has no to_float"
    return None


@rule("blas_out_prod")
def blas_out_prod(t, env: Env, arg) -> str | None:
    s0, s1 = src(t, 0), src(t, 1)
    ok = (
        s0.contents.type == F32
        and s1.contents.type == F32
        and g.ggml_is_matrix(s0)
        and g.ggml_is_matrix(s1)
        and g.ggml_is_contiguous(s0)
        and (g.ggml_is_contiguous(s1) or g.ggml_is_transposed(s1))
    )
    return None if ok else "OUT_PROD needs F32 contiguous matrices"


# ---- Hexagon (ggml-hexagon.cpp ggml_hexagon_supported_*) ----------------------------------------------------
@rule("hex_binary")
def hex_binary(t, env: Env, arg) -> str | None:
    s0, s1 = src(t, 0), src(t, 1)
    t0, t1, td = s0.contents.type, s1.contents.type, t.contents.type
    if t0 == F32:
        if t1 != F32 or td != F32:
            return "F32 src0 needs F32 src1 and dst"
    elif t0 == F16:
        if t1 != F16 or td != F16:
            return "F16 src0 needs F16 src1 and dst"
    else:
        return f"src0 {tname(t0)}"
    if not g.ggml_are_same_shape(s0, t):
        return "src0 and dst differ in shape"
    if not g.ggml_can_repeat(s1, s0):
        return "src1 cannot be repeated into src0"
    if g.ggml_is_permuted(s1):
        return "src1 permuted"
    if arg == "no_permuted" and (g.ggml_is_permuted(s0) or g.ggml_is_permuted(t)):
        return "src0 or dst permuted"
    return None


@rule("hex_unary")
def hex_unary(t, env: Env, arg) -> str | None:
    s0 = src(t, 0)
    if s0.contents.type != F32 or t.contents.type != F32:
        return "needs F32 src0 and dst"
    if not g.ggml_are_same_shape(s0, t):
        return "src0 and dst differ in shape"
    if not g.ggml_is_contiguous(t):
        return "dst not contiguous"
    if arg == "no_permuted" and g.ggml_is_permuted(s0):
        return "src0 permuted"
    return None


@rule("hex_activation")
def hex_activation(t, env: Env, arg) -> str | None:
    """ggml_hexagon_supported_activations. arg "rows": the v0.21.0 (and 78c531d) form, where src0 and src1 need
    only contiguous rows (ggml_is_contiguous_1) and dst stays fully contiguous; without it (0.15.2, 0.15.3) all
    three must be contiguous."""
    s0, s1 = src(t, 0), src(t, 1)
    contig = g.ggml_is_contiguous_1 if arg == "rows" else g.ggml_is_contiguous
    if s0.contents.type != F32 or t.contents.type != F32:
        return "needs F32 src0 and dst"
    if not contig(s0) or not g.ggml_is_contiguous(t):
        return "src0 rows and dst must be contiguous" if arg == "rows" else "src0 and dst must be contiguous"
    if s1 is not None:
        if s1.contents.type != F32 or not g.ggml_are_same_shape(s0, s1) or not contig(s1):
            return "src1 must be F32, contiguous and shaped like src0"
    return None


@rule("hex_softmax")
def hex_softmax(t, env: Env, arg) -> str | None:
    s0, s1 = src(t, 0), src(t, 1)
    if src(t, 2) is not None:
        return "sinks (src2) not supported"
    if s0.contents.type != F32 or t.contents.type != F32:
        return "needs F32 src0 and dst"
    if s1 is not None:
        a, b = ne(s0), ne(s1)
        if s1.contents.type not in (F32, F16) or a[0] != b[0] or b[1] < a[1] or a[2] % b[2] or a[3] % b[3]:
            return "mask shape/type not supported"
        if not g.ggml_is_contiguous(s1):
            return "mask not contiguous"
    if not g.ggml_is_contiguous(s0) or not g.ggml_is_contiguous(t):
        return "src0/dst not contiguous"
    n0 = ne(s0)[0]
    if n0 > 32 and n0 % 32:
        return f"row size {n0} > 32 and not a multiple of 32"
    if n0 > 131072:
        return f"row size {n0} > 131072"
    return None


@rule("hex_flash_attn_ext")
def hex_flash_attn_ext(t, env: Env, arg) -> str | None:
    """FLASH_ATTN_EXT (ggml_hexagon_supported_flash_attn_ext: 707321c4 lines 2567-2600, eced84c8 1883-1916,
    8599e0ea 2093-2137): Q F16 or F32, K and V F16, an F16 mask, F32 sinks, an F32 or F16 result with ne[3] = 1;
    from v0.21.0 (`arg` "vtcm") also the kernel's parameters and their VTCM against the session's budget
    (ggml_hexagon_precompute_flash_attn_params), which is not modelled: an attention that passes the types is
    refused there with that said. kzlab's flash graphs (attn='flash', the CPU's) hold float32 keys and values:
    refused on their types in every release."""
    q, k, v = src(t, 0), src(t, 1), src(t, 2)
    mask, sinks = t.contents.src[3], t.contents.src[4]
    if q.contents.type not in (F16, F32) or k.contents.type != F16 or v.contents.type != F16:
        return "K and V must be F16 (Q F16 or F32)"
    if mask and mask.contents.type != F16:
        return "mask must be F16"
    if sinks and sinks.contents.type != F32:
        return "sinks must be F32"
    if t.contents.type not in (F32, F16) or ne(t)[3] != 1:
        return "result must be F32 or F16 with ne[3] = 1"
    if arg == "vtcm":
        return "the kernel's parameters and VTCM budget (ggml_hexagon_precompute_flash_attn_params) are not modelled"
    return None


@rule("hex_rope")
def hex_rope(t, env: Env, arg) -> str | None:
    """ggml_hexagon_supported_rope. Without arg (0.15.2, 0.15.3): VISION refused, every operand contiguous. arg
    "strided" (v0.21.0, 78c531d): op_params[15] (ggml_rope_set_offset) a multiple of 32, VISION accepted when
    n_dims == ne0/2, src0/dst need only nb[0] == 4 and nb[1] >= ne[0]*4 (strided views allowed), positions and freq
    factors contiguous. All: modes with bit 0 set refused (`mode & 1`: NORMAL, 0, and NEOX, 2, both pass), freq
    factors F32 with ne[0] >= n_dims/2."""
    p = t.contents.op_params
    mode, n_dims = int(p[2]), int(p[1])
    s0, s1, s2 = src(t, 0), src(t, 1), src(t, 2)
    if arg == "strided":
        if int(p[15]) % 32:
            return f"rope offset {int(p[15])} not a multiple of 32"
        if mode == g.GGML_ROPE_TYPE_VISION and n_dims != ne(s0)[0] // 2:
            return f"vision rope with n_dims {n_dims} != ne0/2"
    elif mode == g.GGML_ROPE_TYPE_VISION:
        return f"rope mode {mode}"
    if mode & 1:
        return f"rope mode {mode}"
    if s0.contents.type != F32 or t.contents.type != F32 or s1.contents.type != I32:
        return "needs F32 src0/dst and I32 positions"
    if s2 is not None and (s2.contents.type != F32 or ne(s2)[0] < n_dims // 2):
        return "freq factors not F32 or shorter than n_dims/2"
    if arg == "strided":
        for x in (s1, s2):
            if x is not None and not g.ggml_is_contiguous(x):
                return "positions/freq factors must be contiguous"
        for x in (s0, t):
            if int(x.contents.nb[0]) != 4 or int(x.contents.nb[1]) < ne(x)[0] * 4:
                return "src0/dst rows not contiguous F32"
        return None
    for x in (s0, s1, s2, t):
        if x is not None and not g.ggml_is_contiguous(x):
            return "operands must be contiguous"
    return None


@rule("hex_get_rows")
def hex_get_rows(t, env: Env, arg) -> str | None:
    s0, s1 = src(t, 0), src(t, 1)
    if s0.contents.type != F32:
        return f"table {tname(s0.contents.type)} (F32 only)"
    if s1.contents.type not in (I32, g.GGML_TYPE_I64) or t.contents.type != F32:
        return "needs I32/I64 indices and F32 dst"
    return None


@rule("hex_cpy")
def hex_cpy(t, env: Env, arg) -> str | None:
    s0 = src(t, 0)
    a, d = s0.contents.type, t.contents.type
    if a not in (F32, F16) or d not in (F32, F16):
        return "F32/F16 only"
    if a != d and (g.ggml_is_transposed(s0) or g.ggml_is_transposed(t) or not g.ggml_are_same_shape(s0, t)):
        return "type conversion and reshaping at once"
    return None


@rule("hex_cont")
def hex_cont(t, env: Env, arg) -> str | None:
    return None if src(t, 0).contents.type in (F32, F16) else "F32/F16 only"


@rule("hex_concat")
def hex_concat(t, env: Env, arg) -> str | None:
    for x in [src(t, i) for i in range(g.GGML_MAX_SRC)]:
        if x is not None and x.contents.type not in (F32, F16, I32):
            return f"src {tname(x.contents.type)}"
    return None


@rule("hex_pad")
def hex_pad(t, env: Env, arg) -> str | None:
    return None if src(t, 0).contents.type == F32 and t.contents.type == F32 else "F32 only"


@rule("hex_sum_rows")
def hex_sum_rows(t, env: Env, arg) -> str | None:
    s0 = src(t, 0)
    ok = s0.contents.type == F32 and t.contents.type == F32 and g.ggml_is_contiguous(s0) and g.ggml_is_contiguous(t)
    return None if ok else "F32 contiguous only"


@rule("hex_repeat")
def hex_repeat(t, env: Env, arg) -> str | None:
    s0 = src(t, 0)
    if s0.contents.type not in (F32, F16) or s0.contents.type != t.contents.type:
        return "F32/F16, same type"
    if any(d % s for d, s in zip(ne(t), ne(s0), strict=True)) or g.ggml_is_transposed(s0) or g.ggml_is_transposed(t):
        return "dst not a whole repeat of src0"
    return None


@rule("hex_im2col_2d")
def hex_im2col_2d(t, env: Env, arg) -> str | None:
    """ggml-org/ggml v0.21.0 (and 78c531d): 2-D, unpadded im2col only (F32 input)."""
    p = t.contents.op_params
    if int(p[6]) != 1:
        return "1-D IM2COL (only 2-D is accepted)"
    s1 = src(t, 1)
    if s1.contents.type != F32 or t.contents.type not in (F16, F32):
        return "needs F32 input and F16/F32 dst"
    if not g.ggml_is_contiguous(s1) or not g.ggml_is_contiguous(t):
        return "input/dst not contiguous"
    if int(p[2]) or int(p[3]):
        return "padded IM2COL"
    return None


def _hex_mm_types(t, env: Env, era: str) -> str | None:
    """The type/layout switch of ggml_hexagon_supported_mul_mat, the same in 0.15.2, 0.15.3, v0.21.0 and 78c531d but for
    the quantized row limits: era "rowlimit" (0.15.2: ggml_nrows(src0) > 16384 refused) or "vtcm" (0.15.3 on:
    src0 ne[1] > 32768 refused). F16 and F32 src0 (F32 only with F32 src1) refuse a permuted src0 and a src1
    batch smaller than src0's (broadcasting) in every era."""
    s0, s1 = src(t, 0), src(t, 1)
    if t.contents.type != F32:
        return "dst not F32"
    if s1.contents.type not in (F32, F16):
        return f"src1 {tname(s1.contents.type)}"
    w = s0.contents.type
    if w in QUANT_HEX:
        if ne(s0)[0] % 32:
            return "quantized src0 ne0 % 32 != 0"
        if era == "rowlimit" and nrows(s0) > 16 * 1024:
            return f"quantized src0 rows {nrows(s0)} > 16384"
        if era == "vtcm" and ne(s0)[1] > 32768:
            return f"quantized src0 ne1 {ne(s0)[1]} > 32768"
        if ne(s1)[2] != 1 or ne(s1)[3] != 1:
            return "quantized: src1 broadcasting"
        if env.buffer_kind(s0) not in (None, "htp-repack"):
            return "quantized src0 not in the REPACK buffer"
        return None
    if w in (F16, F32):
        if w == F32 and s1.contents.type != F32:
            return "F32 src0 needs F32 src1"
        if int(s0.contents.nb[1]) < int(s0.contents.nb[0]):
            return f"permuted {tname(w)} src0"
        if ne(s1)[2] < ne(s0)[2] or ne(s1)[3] < ne(s0)[3]:
            return "src1 batch smaller than src0's (broadcasting)"
        return None
    return f"src0 {tname(w)} not supported"


@rule("hex_mul_mat_rowlimit")
def hex_mul_mat_rowlimit(t, env: Env, arg) -> str | None:
    """0.15.2: F16, F32 (x F32) and repacked quantized src0, and `ggml_nrows(src1) > 1024` refused."""
    why = _hex_mm_types(t, env, "rowlimit")
    if why:
        return why
    limit = int(arg or 1024)
    rows = nrows(src(t, 1))
    if rows > limit:
        return f"ggml_nrows(src1) = {rows} > {limit}"
    return None


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


# ggml-hexagon/htp/matmul-ops.h: aligned weight tile sizes and the q8 activation row sizes of the quantized paths
_ALIGNED_TILE = {"q4_0": 640, "iq4_nl": 640, "q4_1": 640, "q8_0": 1152, "mxfp4": 640}


def _q8_row(wname: str, k: int, tiled: bool) -> int:
    q8_1 = wname == "q4_1"
    if tiled:
        return _up(k, 128) // 32 * (1280 if q8_1 else 1152)
    return _up(k, 128) + _up(-(-k // 32) * (4 if q8_1 else 2), 128)


def _hvx_quant_need(t, threads: int, layout: str, tiled: bool, prefetch: int) -> int:
    """VTCM bytes of the HVX quantized kernel (tiled at `prefetch` rows, or the flat fallback at 16)."""
    s0, s1 = src(t, 0), src(t, 1)
    wname, k = tname(s0.contents.type), ne(s0)[0]
    m = ne(s1)[1] * ne(s1)[2] * ne(s1)[3]
    q_row = _q8_row(wname, k, tiled)
    tile_row = k // 32 * _ALIGNED_TILE[wname]
    dst_row = _up(int(t.contents.nb[1]), 128) if m <= 1 else 0
    src1 = _up(q_row * m, 256)
    if layout in ("78c531d", "v0.21.0"):  # htp_mm_hvx_vtcm_layout_build
        src0 = _up(prefetch * tile_row, 256) * threads
        dst = max(dst_row, _up(k * 4, 128 * 4)) * threads
    else:  # eced84c8 htp_mm_hvx_get_vtcm_sizes
        pad = _up(q_row, 128 * 4) if tiled else _up(q_row, 256)
        src0 = max(_up(prefetch * tile_row, 256), pad) * threads
        dst = dst_row * threads
    return src0 + src1 + dst


def _hvx_float_need(t, threads: int, vtcm_kernel: bool) -> int:
    """VTCM bytes of the HVX F16/F32-weight kernels: the VTCM one (all of src1 in VTCM, F16 for F16 weights, F32
    for F32 weights) or the DDR one (per thread 16 rows of src0 and 16 rows of src1 at src1's own stride)."""
    s0, s1 = src(t, 0), src(t, 1)
    k, m = ne(s1)[0], ne(s1)[1] * ne(s1)[2] * ne(s1)[3]
    nb01, nb11 = int(s0.contents.nb[1]), int(s1.contents.nb[1])
    dst = _up(int(t.contents.nb[1]), 128) * threads if m <= 1 else 0
    if vtcm_kernel:
        esize = 2 if s0.contents.type == F16 else 4
        return _up(_up(k * esize, 128) * m, 256) + _up(16 * _up(nb01, 128), 256) * threads + dst
    return _up(16 * nb01, 256) * threads + _up(16 * nb11, 256) * threads + dst


@rule("hex_mul_mat_vtcm")
def hex_mul_mat_vtcm(t, env: Env, arg) -> str | None:
    """0.15.3 on (v0.21.0, 78c531d): no row limit; refused when the kernel the host-side solver picks needs more
    VTCM than the session has (ggml_hexagon_supported_mul_mat: kparams.vtcm_size > sess->vtcm_size).

    arg: {vtcm_bytes, threads, layout}. The session's VTCM size and thread count come from the hardware query
    (htp_iface_hwinfo) or, when it fails, 8 MiB and 8 threads. A product the profile's path rule sends to HMX
    (`hex_mm_path`: HMX on, the shape eligible and within what the HMX solver fits) is accepted; the rest take the
    HVX kernels, sized exactly as ggml_hexagon_precompute_hvx_mm_params sizes them (F16/F32
    weights: the all-src1-in-VTCM kernel when it fits and src0 is neither batched nor permuted, else the
    DDR-streaming kernel; quantized weights: the tiled kernel at its smallest prefetch depth, else the flat
    fallback); `layout` picks the quantized sizing of 0.15.3 ("eced84c8") or of v0.21.0 / 78c531d.
    """
    why = _hex_mm_types(t, env, "vtcm")
    if why:
        return why
    cfg = arg or {}
    if kernel_path_of(env, t) == "hmx":  # the HMX solver fits it: ggml_hexagon_precompute_matmul_params
        return None
    budget = int(cfg.get("vtcm_bytes", 8 * 1024 * 1024))
    threads = int(cfg.get("threads", 8))
    layout = str(cfg.get("layout", "eced84c8"))
    s0 = src(t, 0)
    if s0.contents.type in QUANT_HEX:
        if ne(s0)[0] % 32 == 0 and _hvx_quant_need(t, threads, layout, True, 2) <= budget:
            return None
        need, kernel = _hvx_quant_need(t, threads, layout, False, 16), "hvx-flat"
    else:
        if not (ne(s0)[2] > 1 or ne(s0)[3] > 1) and not (g.ggml_is_permuted(s0) or g.ggml_is_permuted(src(t, 1))):
            if _hvx_float_need(t, threads, True) <= budget:
                return None
        need, kernel = _hvx_float_need(t, threads, False), "hvx-ddr"
    if need <= budget:
        return None
    hmx = "" if options_of(env).get("hmx", True) else " (HMX off: GGML_HEXAGON_USE_HMX=0)"
    return f"{kernel} VTCM need {need} B > {budget} B on {threads} threads{hmx}"


def _hmx_why_not(t, cfg: dict) -> str:
    """Why a MUL_MAT does not take HMX ("" when it does). cfg `era`: "device" (0.15.2: op_matmul decides on the
    DSP, htp/matmul-ops.c 707321c4 lines 4710-4822) or "host" (0.15.3 on: ggml_hexagon_matmul_is_hmx_eligible,
    ggml-hexagon.cpp eced84c8 lines 1972-2017, 8599e0ea lines 2194-2241, then the HMX VTCM solver);
    `hmx_src1_f32`: 78c531d's F32 activations only (ggml-hexagon.cpp 78c531d4 lines 2217-2221); `hmx_k_max`: the
    largest K the host's HMX solver fits in the session's VTCM."""
    s0, s1 = src(t, 0), src(t, 1)
    w = s0.contents.type
    device = cfg.get("era") == "device"
    k, n, m = ne(s0)[0], ne(s0)[1], ne(s1)[1]
    if w not in (F16, F32) and w not in QUANT_HEX:
        return f"src0 {tname(w)} has no HMX kernel"
    if (n if device or w not in QUANT_HEX else _up(n, 32)) % 32:
        return f"N = {n} not a multiple of 32"
    if cfg.get("hmx_src1_f32") and s1.contents.type != F32:
        return f"src1 {tname(s1.contents.type)}: HMX takes F32 activations only"
    kal = 256 if device and w in QUANT_HEX else 32
    if k % kal:
        return f"K = {k} not a multiple of {kal}"
    if (ne(s0)[2] * ne(s0)[3] > 1 or ne(s1)[2] * ne(s1)[3] > 1) and w != F16:
        return f"batched {tname(w)} (only F16 is batched on HMX)"
    if int(s0.contents.nb[0]) > int(s0.contents.nb[1]) or int(s1.contents.nb[0]) > int(s1.contents.nb[1]):
        return "a transposed operand"
    min_rows = 32 if device else 5  # device: m_total & ~31 (matmul-ops.c:4757); host: HTP_MM_HMX_MIN_NROWS 4
    if m < min_rows:
        return f"src1 rows {m} < {min_rows}"
    k_max = int(cfg.get("hmx_k_max", 0))
    if not device and k_max and k > k_max:
        return f"K = {k} > {k_max}, beyond what the HMX VTCM solver was found to fit"
    return ""


@path_rule("hex_mm_path")
def hex_mm_path(t, env: Env, arg) -> str:
    """The kernel a MUL_MAT the HTP accepts runs on: "hmx" (the matrix unit) or "hvx" (the vector units), as
    `_hmx_why_not` decides for the profile's era, with HMX on unless the profile's option `hmx` is off
    (GGML_HEXAGON_USE_HMX=0)."""
    return "hmx" if options_of(env).get("hmx", True) and not _hmx_why_not(t, arg or {}) else "hvx"


def path_of(item: list, t, env: Env) -> str:
    """Run a profile's path rule ([name] or [name, argument]) on a node."""
    return PATHS[item[0]](t, env, item[1] if len(item) > 1 else None)


# ---- CUDA (ggml-cuda.cu ggml_backend_cuda_device_supports_op, the parts the decoder uses) --------------------
# Transcribed from ggml-org/ggml eced84c8 (v0.15.3, the ggml ggml-python 0.0.45 vendors) src/ggml-cuda/ggml-cuda.cu,
# supports_op at lines 5054-5456. Its first two loops (lines 5057-5074: no split buffer but for MUL_MAT, every
# source on this device) never refuse a one-GPU placement, so they have no rule. A rule that only asks for a
# contiguous operand (the unary ops, GROUP_NORM) is the generic `contiguous_src0` below.
def _types(*names: str) -> frozenset[int]:
    """ggml type ids by name; a name this ggml lacks is left out (the source's switch cannot meet it either)."""
    return frozenset(getattr(g, f"GGML_TYPE_{n}") for n in names if hasattr(g, f"GGML_TYPE_{n}"))


#: MUL_MAT / MUL_MAT_ID: the src0 types of the switch at lines 5156-5186
CUDA_MUL_MAT_SRC0 = _types(
    *"F32 F16 Q1_0 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 MXFP4 NVFP4 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ1_M IQ1_S IQ2_S IQ2_XS".split(),
    *"IQ2_XXS IQ3_S IQ3_XXS IQ4_NL IQ4_XS BF16".split(),
)
#: GET_ROWS: the table (src0) types of lines 5192-5206
CUDA_GET_ROWS_SRC0 = _types(*"F16 F32 BF16 I32 Q1_0 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0".split())
#: CPY: the (src0, src1) type pairs of lines 5236-5277 besides any two float types and a same-type contiguous copy
_CPY_PAIRS = (
    "F32>Q8_0 Q8_0>F32 F32>Q4_0 Q4_0>F32 F32>Q4_1 Q4_1>F32 F32>Q5_0 Q5_0>F32 F32>Q5_1 Q5_1>F32 F32>IQ4_NL "
    "F32>I32 I32>F32 I32>I32"
)
CUDA_CPY_PAIRS = frozenset(
    (getattr(g, f"GGML_TYPE_{a}"), getattr(g, f"GGML_TYPE_{b}")) for a, b in (p.split(">") for p in _CPY_PAIRS.split())
)
CUDA_FLOATS = frozenset({F32, F16, BF16})


@rule("cuda_types_f32_f16")
def cuda_types_f32_f16(t, env: Env, arg) -> str | None:
    """ADD, SUB, MUL, DIV (lines 5356-5362): both operands and the result F32 or F16; broadcasting and strides
    are the kernels' business, so no layout condition."""
    s0, s1 = src(t, 0), src(t, 1)
    ok = s0.contents.type in (F32, F16) and s1.contents.type in (F32, F16) and t.contents.type in (F32, F16)
    return None if ok else "binary op needs F32/F16 operands"


@rule("cuda_mul_mat")
def cuda_mul_mat(t, env: Env, arg) -> str | None:
    """MUL_MAT (lines 5121-5187): an F16 src1 only with an F16 src0 (line 5140), then src0's type from the list at
    lines 5156-5186. The split-buffer branch (lines 5126-5139) needs a multi-GPU split buffer and the MUSA one
    (lines 5143-5155) a Moore Threads GPU: neither is a placement kzlab simulates."""
    a, b = src(t, 0), src(t, 1)
    if b.contents.type == F16 and a.contents.type != F16:
        return f"F16 src1 with a {tname(a.contents.type)} src0 (an F16 src1 needs an F16 src0)"
    return None if a.contents.type in CUDA_MUL_MAT_SRC0 else f"src0 {tname(a.contents.type)} not in the type list"


@rule("cuda_conv_transpose_1d")
def cuda_conv_transpose_1d(t, env: Env, arg) -> str | None:
    """CONV_TRANSPOSE_1D (lines 5314-5322): an F32 kernel and an F32 input only (ggml-cuda has no F16 kernel for
    it, so a conv-transpose with F16 weights stays on the CPU)."""
    ok = src(t, 0).contents.type == F32 and src(t, 1).contents.type == F32
    return None if ok else "CONV_TRANSPOSE_1D needs F32 kernel and input"


@rule("cuda_col2im_1d")
def cuda_col2im_1d(t, env: Env, arg) -> str | None:
    """COL2IM_1D (lines 5323-5330): a contiguous F32/F16/BF16 src0, a contiguous result of the same type."""
    s0 = src(t, 0)
    ok = (
        s0.contents.type in (F32, F16, BF16)
        and t.contents.type == s0.contents.type
        and g.ggml_is_contiguous(s0)
        and g.ggml_is_contiguous(t)
    )
    return None if ok else "COL2IM_1D needs a contiguous F32/F16/BF16 src0 of dst's type"


@rule("contiguous_src0")
def contiguous_src0(t, env: Env, arg) -> str | None:
    """ggml_is_contiguous(src0): ggml-cuda's unary ops (lines 5078-5103, every unary op of this ggml) and
    SUM_ROWS / MEAN / GROUP_NORM (lines 5418-5421). A GroupNorm of a view the scheduler cannot copy stays on the
    CPU; kzlab's own GroupNorm reads a contiguous tensor."""
    return None if g.ggml_is_contiguous(src(t, 0)) else "src0 not contiguous"


@rule("contiguous_rows_src0")
def contiguous_rows_src0(t, env: Env, arg) -> str | None:
    """ggml_is_contiguous_rows(src0): NORM, RMS_NORM, L2_NORM (lines 5334-5337)."""
    return None if g.ggml_is_contiguous_rows(src(t, 0)) else "src0 rows not contiguous"


@rule("cuda_rope")
def cuda_rope(t, env: Env, arg) -> str | None:
    """ROPE (lines 5394-5397): src0's elements packed (nb[0] = the type's size) and contiguous past dim 2."""
    s0 = src(t, 0)
    ok = int(s0.contents.nb[0]) == g.ggml_type_size(s0.contents.type) and g.ggml_is_contiguous_2(s0)
    return None if ok else "src0 layout"


@rule("cuda_concat")
def cuda_concat(t, env: Env, arg) -> str | None:
    """CONCAT (lines 5301-5313): one type for both operands and the result, not quantized, one element a block,
    of 1, 2, 4 or 8 bytes."""
    a, b = src(t, 0).contents.type, src(t, 1).contents.type
    ok = (
        a == b == t.contents.type
        and not g.ggml_is_quantized(a)
        and g.ggml_blck_size(a) == 1
        and g.ggml_type_size(a) in (1, 2, 4, 8)
    )
    return None if ok else "CONCAT types differ"


@rule("cuda_repeat")
def cuda_repeat(t, env: Env, arg) -> str | None:
    """REPEAT (lines 5293-5298): an F32 or F16 src0 (the only types its kernel implements)."""
    return None if src(t, 0).contents.type in (F32, F16) else "REPEAT F32/F16 only"


@rule("cuda_get_rows")
def cuda_get_rows(t, env: Env, arg) -> str | None:
    """GET_ROWS (lines 5190-5207): the table's (src0) type from the list at lines 5192-5206."""
    return None if src(t, 0).contents.type in CUDA_GET_ROWS_SRC0 else "table type"


@rule("cuda_cpy")
def cuda_cpy(t, env: Env, arg) -> str | None:
    """CPY (lines 5227-5282): src0 into src1 (the destination tensor the result views) for any two of F32, F16,
    BF16, the quantize / dequantize and integer pairs listed, or one type between two contiguous tensors."""
    s0, s1 = src(t, 0), src(t, 1)
    a, b = s0.contents.type, s1.contents.type
    if (a in CUDA_FLOATS and b in CUDA_FLOATS) or (a, b) in CUDA_CPY_PAIRS:
        return None
    if a == b and g.ggml_is_contiguous(s0) and g.ggml_is_contiguous(s1):
        return None
    return "type pair"


@rule("cuda_acc")
def cuda_acc(t, env: Env, arg) -> str | None:
    """ACC (lines 5405-5408): both operands contiguous (the source notes rows would do, as a TODO). kzlab's
    ktap-acc adds each tap's product, a fresh contiguous tensor, into another: accepted."""
    for i in (0, 1):
        if not g.ggml_is_contiguous(src(t, i)):
            return f"src{i} not contiguous"
    return None


#: fattn.cu eced84c8 lines 375-422: the K head sizes with a kernel for a V head of the same size (192, 320, 512 and 576
#: pair with other V heads, under grouped-query conditions, lines 388-419)
CUDA_FA_HEADS = (40, 64, 72, 80, 96, 112, 128, 256)
CUDA_FA_GQA_HEADS = (192, 320, 512, 576)


@rule("cuda_flash_attn_ext")
def cuda_flash_attn_ext(t, env: Env, arg) -> str | None:
    """FLASH_ATTN_EXT (line 5440-5441: ggml_cuda_flash_attn_ext_supported, fattn.cu 595-596, true when
    ggml_cuda_get_best_fattn_kernel, lines 340-538, finds a kernel): the K head size has one and V's head is its
    size (375-422), K and V one type (425-427) of F32, F16, Q4_0, Q8_0 or BF16 (430-446), a mask not broadcast
    over dim 2 (448-450); past those checks some kernel always runs it (the tile kernel last, line 537). The four
    head sizes whose kernels need grouped-query conditions are refused here, as kzlab's graphs never build them.
    Assumes FLASH_ATTN_AVAILABLE, which CUDA builds define (HIP and MUSA builds may not)."""
    q, k, v = src(t, 0), src(t, 1), src(t, 2)
    dk, dv = int(k.contents.ne[0]), int(v.contents.ne[0])
    if dk in CUDA_FA_GQA_HEADS:
        return f"head size {dk}: its kernels need grouped-query conditions (fattn.cu 388-419) not modelled here"
    if dk not in CUDA_FA_HEADS or dv != dk:
        return f"no kernel for K head {dk} with V head {dv}"
    if k.contents.type != v.contents.type:
        return "K and V of different types"
    if k.contents.type not in (F32, g.GGML_TYPE_F16, g.GGML_TYPE_Q4_0, g.GGML_TYPE_Q8_0, g.GGML_TYPE_BF16):
        return "K's type has no kernel"
    mask = t.contents.src[3]
    if mask and int(mask.contents.ne[2]) != 1:
        return "mask broadcast over dim 2"
    if int(q.contents.ne[2]) % int(k.contents.ne[2]):
        return "query heads not a multiple of K's (GGML_ASSERT, line 353)"
    return None


@rule("cuda_ssm_conv")
def cuda_ssm_conv(t, env: Env, arg) -> str | None:
    """SSM_CONV (lines 5374-5377): src0's ne[1] (the channels) a multiple of 128, the kernel's threads per block.
    WavTokenizer's one-frame depthwise conv is an SSM_CONV over its channels: 768 at full size (accepted), 64 in
    the tiny test file (refused)."""
    n = int(src(t, 0).contents.ne[1])
    return None if n % 128 == 0 else f"src0 ne[1] = {n}, not a multiple of 128"


@rule("cuda_set")
def cuda_set(t, env: Env, arg) -> str | None:
    """SET (lines 5220-5225): the result F32 or I32, and both operands of its type (kzlab's CPU join writes F32
    parts into an F32 output)."""
    ty = t.contents.type
    ok = ty in (F32, I32) and src(t, 0).contents.type == ty and src(t, 1).contents.type == ty
    return None if ok else "SET needs F32 or I32 operands of the result's type"


# ---- CUDA kernels' own asserts --------------------------------------------------------------------------------
# supports_op accepts some nodes whose kernel then stops the process with a GGML_ASSERT or GGML_ABORT. The scheduler
# places such a node on the GPU all the same, and the decode aborts when it reaches it. The rules below refuse what
# those kernels assert (ggml-org/ggml eced84c8, src/ggml-cuda/), so that a simulated placement is one a GPU can run;
# on exactly these nodes it differs from the real scheduler's assignment. tests/test_profile_sources.py holds the
# asserts read from every kernel kzlab's graphs reach on CUDA, each with its file and line.
#: ssm-conv.cu eced84c8 lines 150-157: the d_conv (kernel sizes) ssm_conv_f32_cuda has a kernel for
CUDA_SSM_CONV_SIZES = (3, 4, 5, 9, 15)


@rule("cuda_unary_kernel")
def cuda_unary_kernel(t, env: Env, arg) -> str | None:
    """ggml_cuda_op_unary's asserts (ggml-cuda/unary.cu eced84c8 lines 137-155): a contiguous src0 (line 144), F32 or
    F16 (146-147), the result of src0's type (148). It is the kernel of SQR, SQRT, SIN, COS and LOG (lines 213-231)
    and of the UNARY ops (157-259), and it reads src0 as one flat run of elements (line 153). supports_op accepts
    SQR, SQRT, SIN, COS and LOG whatever their operands (ggml-cuda.cu lines 5349-5355) and the UNARY ops on a
    contiguous src0 of any type (line 5103), so a SIN of a strided view (WavTokenizer's in-graph iSTFT takes the
    phase as a view of every row's second half) would be scheduled on the GPU and abort there."""
    s0 = src(t, 0)
    a, d = s0.contents.type, t.contents.type
    if not g.ggml_is_contiguous(s0):
        return "src0 not contiguous: supports_op takes it, ggml_cuda_op_unary asserts it (unary.cu 144)"
    if a not in (F32, F16) or d != a:
        return f"{tname(a)} -> {tname(d)}: ggml_cuda_op_unary asserts F32 or F16 of one type (unary.cu 146-148)"
    return None


@rule("cuda_ssm_conv_kernel")
def cuda_ssm_conv_kernel(t, env: Env, arg) -> str | None:
    """ggml_cuda_op_ssm_conv's asserts past supports_op's channel count (ggml-cuda/ssm-conv.cu eced84c8 lines
    160-206): packed F32 elements in src0 and src1 (lines 181-182), src0's rows contiguous (183), an F32 src0 and
    result (191-192); then ssm_conv_f32_cuda aborts on a kernel size (src1 ne[0]) it has no kernel for (lines
    150-157: 3, 4, 5, 9 and 15). WavTokenizer's one-frame depthwise conv has 7 taps: supports_op accepts it at 768
    channels (line 5376) and the kernel aborts."""
    s0, s1 = src(t, 0), src(t, 1)
    k = int(s1.contents.ne[0])
    if k not in CUDA_SSM_CONV_SIZES:
        return f"kernel size {k}: ssm_conv_f32_cuda has kernels for {CUDA_SSM_CONV_SIZES} only (ssm-conv.cu 156)"
    ts = g.ggml_type_size(F32)
    packed = int(s0.contents.nb[0]) == ts and int(s1.contents.nb[0]) == ts
    if not packed or int(s0.contents.nb[1]) != int(s0.contents.ne[0]) * ts:
        return "src0 rows or src1 elements not packed (ssm-conv.cu 181-183)"
    if s0.contents.type != F32 or t.contents.type != F32:
        return "src0 and the result must be F32 (ssm-conv.cu 191-192)"
    return None


def cuda_conv2d_dw_kernel_layout(t) -> str | None:
    """Why ggml-cuda's CONV_2D_DW kernel would abort on this node or misread its weights, None when it runs right.

    supports_op accepts every CONV_2D_DW (line 5401), but ggml_cuda_op_conv2d_dw (ggml-cuda/conv2d-dw.cu eced84c8
    lines 119-161) asserts F32 kernel, input and result (line 123), then runs its WHCN kernel on a contiguous input
    and its CWHN kernel on a channels-contiguous one (lines 150-157) and aborts on any other layout (line 159). Either
    kernel reads the weights by its own index, whatever their strides: WHCN as [C][KH][KW] (lines 40-42), CWHN
    channels innermost, [KH][KW][C] (lines 60-62). Not a supports_op rule (the scheduler places such a node on CUDA
    all the same): a check that the graphs kzlab builds (a channels-contiguous input, its [C, K] weight viewed
    channels innermost) run as the CPU computes them."""
    k, x = src(t, 0), src(t, 1)
    if not all(int(v.contents.type) == F32 for v in (k, x, t)):
        return "kernel, input and result must be F32 (conv2d-dw.cu line 123)"
    ts, kne, knb = g.ggml_type_size(F32), ne(k), [int(k.contents.nb[i]) for i in range(4)]
    if g.ggml_is_contiguous(x):
        return None if g.ggml_is_contiguous(k) else "WHCN kernel reads non-contiguous weights as contiguous"
    if not g.ggml_is_contiguous_channels(x):
        return "input neither contiguous nor channels-contiguous (conv2d-dw.cu line 159 aborts)"
    # channels innermost: [KW, KH, 1, C] with C packed, then KW, then KH
    if knb[3] != ts or knb[0] != ts * kne[3] or (kne[1] > 1 and knb[1] != ts * kne[3] * kne[0]):
        return "CWHN kernel reads the weights channels innermost; these are not"
    return None


def check(names: list, t, env: Env) -> tuple[str, str] | None:
    """Run the rules in order; the first refusal as (rule name, reason), or None when all accept."""
    for item in names:
        name, arg = (item, None) if isinstance(item, str) else (item[0], item[1] if len(item) > 1 else None)
        why = RULES[name](t, env, arg)
        if why:
            return name, why
    return None


def addr(t) -> int:
    return int(ctypes.cast(t, ctypes.c_void_p).value or 0)
