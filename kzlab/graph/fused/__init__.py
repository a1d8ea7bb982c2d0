"""kzlab's fused CPU nodes (`ggml_custom_4d` running numpy kernels): SnakeBeta, the whole BigVGAN residual unit, the
SnakeBeta + transposed conv, the ConvNeXt block and the normalised conv.

Why SnakeBeta: ggml 0.15.3 computes SIN with scalar `sinf` (about 10 ns per element here), and in a
channels-first activation every per-channel MUL/ADD is a broadcast of one value per row, which ggml's binary
ops walk one element at a time. Folded SnakeBeta is five such passes (MUL, SIN, SQR, MUL, ADD) over the
largest tensors of the decoder; at 31 frames it was about a third of the CPU decode. numpy's float32 `sin` is
SIMD (AVX2 / AVX-512), and working block by block keeps each block in cache for all five steps, so the fused
node costs roughly a third of the five ggml nodes (benchmarks/decode.py).

The snake node's sources are the activation, the two folded constant vectors (exp(alpha) and
1/(exp(beta)+1e-9)) and, where the conv before it has one, that conv's bias, which the node adds first (in a
channels-first tensor a per-channel ADD is one of those slow broadcasts). The node can also write its output
in the other memory order, which removes the transpose (a CONT) a following 1x1 conv or transposed conv needs.

Why the residual unit (SnakeBeta, dilated k=7 conv, SnakeBeta, 1x1 conv, residual add): lowered to ggml ops it
is an IM2COL that writes 7 copies of its input (ggml's F32 im2col moves about 2 GB/s here), a PAD, a product
and four more passes over tensors of 6-23 MB, i.e. mostly memory traffic. The fused node works on tiles of a
few hundred frames that stay in cache: snake, the conv (by Winograd's F(4, 7), `winograd.py`: 10 products per
four output frames instead of 28; or, with unitconv='direct', K shifted products accumulated in place; no im2col
either way), snake, the 1x1 product, bias and residual, then the tile is written once. The products are numpy's BLAS
(sgemm), each ggml thread taking an even share of the frames in tiles, so numpy's BLAS is held to one thread in
ggml's threads (`after_compute` gives the user's setting back). The transposed conv splits its output channels
instead where its weight is large (the first block's, 75 MB at full size over 124 frames): split by frames, each
thread would stream the whole weight. Over a few input frames (a short stream call) such a weight is split by output
phases (each thread whole rows of it) instead of channels (half rows).

The scheduler, the profiler and the placement simulator see real nodes with real inputs. They run on ggml's
CPU backend only: a device backend (RPC, GPU, Hexagon) cannot call back into this process, which is why
they exist only in the `fast` mode, on CPU and BLAS backends (`kzlab.graph.options`).

ggml runs a kernel on each of its threads with (ith, nth); each thread takes a range of channels or frames.
numpy releases the GIL inside its loops and BLAS calls, so the threads overlap. An exception in a kernel
cannot cross ggml's C frames: it is recorded and raised by `after_compute()` once the graph returns.

Why the ConvNeXt block (depthwise conv, LayerNorm, pointwise MLP with the exact GELU, gamma, residual): ggml 0.15.3
computes GELU_ERF with an `erff` call per element, scalar unless the build vectorises libm calls (14-18 % of a
WavTokenizer decode at 750 frames when scalar; with libmvec the ops are faster than this node and `dwmlp="auto"`
leaves the blocks to them), and between its two products the block's ops are passes over [T, 4C] and [T, C]
tensors. The fused node runs each thread's frames in tiles: the depthwise taps, the LayerNorm, the first product
(numpy's BLAS), a vectorised exact GELU (erf to 1.5e-7, `kernels.gelu_erf`), the second product, gamma and the
residual, then writes the tile once.

Why the normalised conv (WavTokenizer's posnet ResnetBlocks: GroupNorm, swish, a 3-tap conv, twice, and the residual;
and its first conv, 7 taps, with neither): as ggml ops each conv is an IM2COL of 3 (7) copies of its input and a
product of the direct conv's size, and the norm's per-channel MUL and ADD are broadcasts over a channels-first
tensor (about 1.1 ms each at 750 frames against 0.15 ms channels-last). A first node computes the GroupNorm's
statistics (every thread whole groups over every frame, float64 sums) folded with its weight and bias into a
per-channel scale and shift. The conv node, by Winograd's F(6, 3) (8 products per six output frames instead of
18) or F(4, 7) for the first conv, runs in two phases with the threads meeting between them: each thread applies
the scale, shift and swish to its share of the frames and transforms their inputs (B^T z), then each computes its
share of the output channels for every frame (the products, A^T, the bias and the residual). Split by frames alone,
every thread streamed every transformed weight (9.4 MB at 768 channels) for its few rows of products: the posnet's
conv node took 10.3 ms at 750 frames on two threads, 8.5 ms in two phases.

Why the context join (`join_frames`): a streaming call joins each layer's carried past in front of the call's frames
before the layer reads them, and ggml 0.15.3's CONCAT does that on one thread, element by element. The fused
residual unit and transposed conv of a streaming call (and its waveform conv) read their context through this node
instead: two block copies, on one thread below 4 MB (a second thread's entry into Python costs more than it copies),
the rows split between ggml's threads above (1.2 -> 0.3 ms for the 7734 x 96 join of a 4-frame call's last block).

Layout: `kernels.py` the numpy arithmetic (no ggml), `winograd.py` the convs by Winograd's minimal filtering,
`nodes.py` the ggml custom-op glue, `threads.py` the control of numpy's BLAS threads inside ggml's threads.
"""

from kzlab.graph.fused.kernels import (
    UNIT_MAX_ROWS,
    UNIT_MIN_ROWS,
    UNIT_TILE_BYTES,
    convt_channel_rows,
    convt_rows,
    convt_tile_rows,
    unit_rows,
    unit_tile_rows,
)
from kzlab.graph.fused.nodes import (
    DWMLP_SOURCES,
    UNIT_SOURCES,
    VECTOR_ROWS,
    after_compute,
    dwmlp,
    group_norm_affine_node,
    join_frames,
    normconv,
    raise_pending,
    residual_unit,
    snake,
    snake_convt,
)

__all__ = [
    "DWMLP_SOURCES",
    "dwmlp",
    "group_norm_affine_node",
    "join_frames",
    "normconv",
    "UNIT_MAX_ROWS",
    "UNIT_MIN_ROWS",
    "UNIT_SOURCES",
    "UNIT_TILE_BYTES",
    "VECTOR_ROWS",
    "after_compute",
    "convt_channel_rows",
    "convt_rows",
    "convt_tile_rows",
    "raise_pending",
    "residual_unit",
    "snake",
    "snake_convt",
    "unit_rows",
    "unit_tile_rows",
]
