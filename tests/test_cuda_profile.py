"""The CUDA capability profile (devices/cuda.toml, its [perf] in devices/perf/cuda.toml) against ggml-cuda's source
(ggml-org/ggml eced84c8, v0.15.3, the ggml ggml-python 0.0.45 vendors, src/ggml-cuda/ggml-cuda.cu) and against
what the decoders need.

ggml-cuda accepts every op of the decoders' default device graphs (GROUP_NORM, CONV_2D_DW, ACC among them), so the
whole decode is one split on the GPU; its [perf] prices an H100 from NVIDIA's published peaks, below which every
range lies, so a predicted decode is far faster than the measured CPU one.
"""

from __future__ import annotations

import pytest
from ggml import ggml as g

import kzlab
from kzlab.analysis.placement import capabilities
from kzlab.analysis.predict.parameters import DEFAULT_SOURCE, backend_perf

#: the fastest CPU decode of the seed case measured on this machine (README, Performance: the full-size decoder, 31
#: frames, kzlab default, 0.68 s and 0.72 s over two runs, 2 threads); the device graph's portable CPU decode took
#: 2.03-2.33 s
CPU_SEED_MS = 680.0


class NoBuffers:
    """A rule's environment in which no tensor lives in a buffer of a kind the rules ask about."""

    def buffer_kind(self, t):
        return None


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cuda-synth")


@pytest.fixture(scope="module")
def wavtokenizer_full(synth_dir):
    """The full-size WavTokenizer decoder (synthetic F16 weights, the released model's shapes)."""
    from kzlab.formats.synth import synth

    return synth(synth_dir / "wavtokenizer-f16.gguf", preset="wavtokenizer-dec", dtype="f16", seed=0)


@pytest.fixture(scope="module")
def qwen_full(synth_dir):
    """The full-size Qwen3-TTS 12 Hz decoder (synthetic F16 weights): the seed case's model."""
    from kzlab.formats.synth import synth

    return synth(synth_dir / "qwen3-tts-f16.gguf", preset="qwen3-tts-12hz", dtype="f16", seed=0)


def _refused(pl) -> list[tuple[str, str]]:
    return [(n.op, n.refused["CUDA"]) for n in pl.nodes if "CUDA" in n.refused]


# ---- supports_op ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["tiny", "full"])
def test_wavtokenizer_750_frames_is_one_split(which, wavtokenizer_full):
    """GROUP_NORM (lines 5418-5421) and CONV_2D_DW (line 5401) are ggml-cuda ops: the default device graph of
    WavTokenizer at 750 frames runs whole on the GPU. The tiny file (64 channels, 3 ConvNeXt blocks) builds the
    same ops as the released model's shape (768 channels, 12 blocks); only one frame tells them apart
    (test_one_frame_ssm_conv_stays_on_the_cpu)."""
    model = kzlab.resolve_model("wavtokenizer-tiny") if which == "tiny" else wavtokenizer_full
    pl = kzlab.simulate(model, "cuda", frames=750)
    assert pl.n_splits == 1, _refused(pl)
    assert not _refused(pl)
    ops = {n.op for n in pl.nodes if n.backend == "CUDA"}
    assert {"GROUP_NORM", "CONV_2D_DW", "GELU_ERF", "IM2COL", "MUL_MAT"} <= ops
    assert pl.copied_bytes == 750 * 4  # only the codes cross (int32)


def test_qwen_ktap_acc_is_one_split():
    """ktap-acc's in-place sums are ACCs of contiguous products (line 5408): one split, not one a tap."""
    pl = kzlab.simulate(kzlab.resolve_model("tiny"), "cuda", frames=31, conv="ktap-acc")
    assert pl.n_splits == 1, _refused(pl)
    assert sum(n.op == "ACC" and n.backend == "CUDA" for n in pl.nodes) > 50


def test_one_frame_ssm_conv_stays_on_the_cpu(wavtokenizer_full):
    """One frame's depthwise conv is an SSM_CONV. supports_op takes it for a multiple of 128 channels (line 5376):
    the tiny file's 64 are refused there. The released model's 768 pass, but its kernel has no 7-tap form
    (ssm-conv.cu eced84c8 lines 150-157: 3, 4, 5, 9, 15) and aborts: refused by the kernel's rule, on the CPU too."""
    full = kzlab.simulate(wavtokenizer_full, "cuda", frames=1)
    refused = {why for op, why in _refused(full) if op == "SSM_CONV"}
    assert refused == {"cuda_ssm_conv_kernel: kernel size 7: ssm_conv_f32_cuda has kernels for (3, 4, 5, 9, 15) "
                       "only (ssm-conv.cu 156)"}
    assert {op for op, _ in _refused(full)} == {"SSM_CONV"}
    assert all(n.backend == "CPU" for n in full.nodes if n.op == "SSM_CONV")
    tiny = kzlab.simulate(kzlab.resolve_model("wavtokenizer-tiny"), "cuda", frames=1)
    refused = {why for op, why in _refused(tiny) if op == "SSM_CONV"}
    assert refused == {"cuda_ssm_conv: src0 ne[1] = 64, not a multiple of 128"}


def test_in_graph_istft_sin_cos_stay_on_the_cpu():
    """WavTokenizer's in-graph iSTFT (istft=graph) takes the phase as a strided view of the head's output (every row's
    second half) and hands it to SIN and COS. supports_op accepts them on any layout (ggml-cuda.cu lines 5351-5352),
    but their kernel, ggml_cuda_op_unary, asserts a contiguous source (unary.cu eced84c8 line 144, reached from
    ggml_cuda_op_sin / ggml_cuda_op_cos at lines 221-227): a GPU would abort there. They run on the CPU, like the
    EXP of the magnitude (a view too, refused by supports_op, line 5103); the rest of the iSTFT stays on the GPU."""
    pl = kzlab.simulate(kzlab.resolve_model("wavtokenizer-tiny"), "cuda", frames=31, istft="graph")
    istft = {n.op: n for n in pl.nodes if n.name.startswith("istft:")}
    kernel = ("cuda_unary_kernel: src0 not contiguous: supports_op takes it, ggml_cuda_op_unary asserts it "
              "(unary.cu 144)")
    for op in ("SIN", "COS"):
        assert istft[op].backend == "CPU", istft[op]
        assert istft[op].refused["CUDA"] == kernel
    assert istft["EXP"].backend == "CPU" and istft["EXP"].refused["CUDA"].startswith("contiguous_src0")
    assert {op for op, _ in _refused(pl)} == {"SIN", "COS", "EXP"}
    assert {"MUL_MAT", "COL2IM_1D", "CONCAT", "DIV"} <= {op for op, n in istft.items() if n.backend == "CUDA"}


def test_unary_and_ssm_conv_kernel_rules():
    """The kernel rules on hand-built nodes: ggml_cuda_op_unary takes a contiguous F32 or F16 source (unary.cu 144,
    146-148), so a strided or BF16 SIN is refused and a contiguous one accepted; an SSM_CONV of 128 channels runs
    with 4 taps and aborts with 7 (ssm-conv.cu 150-157)."""
    caps = capabilities.load("cuda")
    ctx = g.ggml_init(g.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True))

    try:
        x = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 16, 4)
        half = g.ggml_view_2d(ctx, x, 8, 4, int(x.contents.nb[1]), 8 * 4)  # every row's second half
        assert caps.refusal(g.ggml_sin(ctx, x), NoBuffers()) is None
        assert caps.refusal(g.ggml_cos(ctx, half), NoBuffers())[0] == "cuda_unary_kernel"
        assert caps.refusal(g.ggml_sqr(ctx, half), NoBuffers())[0] == "cuda_unary_kernel"
        bf16 = caps.refusal(g.ggml_sin(ctx, g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_BF16, 16, 4)), NoBuffers())
        assert bf16 is not None and bf16[0] == "cuda_unary_kernel" and "146-148" in bf16[1]
        gelu = caps.refusal(g.ggml_gelu(ctx, g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_BF16, 16, 4)), NoBuffers())
        assert gelu is not None and gelu[0] == "cuda_unary_kernel"  # contiguous (supports_op's, line 5103), BF16

        def ssm(k):
            sx = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F32, k, 128, 1)  # one frame padded by k - 1
            return caps.refusal(g.ggml_ssm_conv(ctx, sx, g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, k, 128)),
                                NoBuffers())

        assert ssm(4) is None
        assert ssm(7)[0] == "cuda_ssm_conv_kernel"
    finally:
        g.ggml_free(ctx)


def test_direct_convt_with_f16_weights_stays_on_the_cpu(qwen_full):
    """CONV_TRANSPOSE_1D is F32 x F32 only (lines 5314-5322): the F16 file's direct transposed convs are refused."""
    pl = kzlab.simulate(qwen_full, "cuda", frames=31, convt="direct")
    refused = [why for op, why in _refused(pl) if op == "CONV_TRANSPOSE_1D"]
    assert refused and all(w.startswith("cuda_conv_transpose_1d") for w in refused)
    assert {op for op, _ in _refused(pl)} == {"CONV_TRANSPOSE_1D"}


def test_mul_mat_type_rules():
    """An F16 src1 needs an F16 src0 (line 5140); src0's type from the list (lines 5156-5186)."""
    caps = capabilities.load("cuda")
    ctx = g.ggml_init(g.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True))

    try:

        def mm(ta, tb):
            a = g.ggml_new_tensor_2d(ctx, ta, 256, 8)
            b = g.ggml_new_tensor_2d(ctx, tb, 256, 4)
            return caps.refusal(g.ggml_mul_mat(ctx, a, b), NoBuffers())

        assert mm(g.GGML_TYPE_F16, g.GGML_TYPE_F16) is None
        assert mm(g.GGML_TYPE_Q4_K, g.GGML_TYPE_F32) is None
        assert mm(g.GGML_TYPE_IQ4_XS, g.GGML_TYPE_F32) is None
        assert mm(g.GGML_TYPE_F32, g.GGML_TYPE_F16)[0] == "cuda_mul_mat"
        assert mm(g.GGML_TYPE_TQ1_0, g.GGML_TYPE_F32)[0] == "cuda_mul_mat"  # not in the list
    finally:
        g.ggml_free(ctx)


# ---- offload_op and GGML_OP_OFFLOAD_MIN_BATCH ----------------------------------------------------------------
def _offloaded(monkeypatch, value: str | None) -> tuple[list, str]:
    """The nodes op_offload moves to CUDA (weights in host memory), and the profile's label."""
    if value is None:
        monkeypatch.delenv("GGML_OP_OFFLOAD_MIN_BATCH", raising=False)
    else:
        monkeypatch.setenv("GGML_OP_OFFLOAD_MIN_BATCH", value)
    pl = kzlab.simulate(kzlab.resolve_model("tiny"), "cuda", frames=31, weights_on="cpu")
    return [n for n in pl.nodes if n.cause == "1.off"], pl.config["profile"]


def test_offload_min_batch_from_the_environment(monkeypatch):
    """ggml-cuda offloads an op whose weights are in host memory when its batch size reaches the threshold it read
    from GGML_OP_OFFLOAD_MIN_BATCH at registration, 32 when unset (lines 5464-5483, 5659): the transformer's
    31-row products stay on the CPU at 32 and move at 16; atoi("x") = 0 offloads even GET_ROWS (batch 0)."""

    def tfm(nodes):
        return [n for n in nodes if n.op == "MUL_MAT" and n.name.startswith("tfm.blk.")]

    base, label = _offloaded(monkeypatch, None)
    assert label == "cuda" and base and not tfm(base) and all(n.op == "MUL_MAT" for n in base)
    lower, label16 = _offloaded(monkeypatch, "16")
    assert tfm(lower) and len(lower) > len(base)
    assert label16 == "cuda (offload_min_batch=16 from GGML_OP_OFFLOAD_MIN_BATCH)"
    assert _offloaded(monkeypatch, "100000")[0] == []
    everything, _ = _offloaded(monkeypatch, "x")
    assert any(n.op == "GET_ROWS" for n in everything) and len(everything) > len(lower)
    assert capabilities.load("cuda").offload_min_batch == 0


@pytest.mark.parametrize(
    "text,value",
    [
        ("32", 32),
        (" \t16", 16),
        ("+7", 7),
        ("-5", -5),
        ("12abc", 12),
        ("", 0),
        ("abc", 0),
        ("0x10", 0),
        ("99999999999", 1215752191),  # strtol's 64 bits cast to int: the low 32 bits
        ("99999999999999999999", -1),  # strtol saturates at LONG_MAX, whose low 32 bits are -1
    ],
)
def test_atoi(text, value):
    """The threshold is read with C's atoi (line 5659), as glibc computes it."""
    assert capabilities.c_atoi(text) == value


# ---- [perf] ----------------------------------------------------------------------------------------------------
#: NVIDIA's H100 datasheet (SXM5 and PCIe, dense): the peaks every range must hold
PEAKS = {
    "bandwidth_gbs": (2000.0, 3350.0),  # HBM2e (PCIe) to HBM3 (SXM5)
    "gflops.MUL_MAT.F32": (51000.0, 67000.0),  # FP32 cores: cublasSgemm
    "gflops.MUL_MAT.F16": (756000.0, 989000.0),  # FP16 tensor cores: cublasGemmEx
    "gflops.MUL_MAT.Q8_0": (1513000.0, 1979000.0),  # INT8 tensor cores: mmq
    "copy_gbs": (64.0, 64.0),  # PCIe Gen5 x16, one direction
}


def test_perf_holds_the_vendor_figures():
    """Every value has a source and a range; each range reaches the vendor's peak (its high end) and lies below it
    (what ggml-cuda reaches on small products is far less)."""
    caps = capabilities.load("cuda")
    perf = backend_perf("CUDA", caps.perf, "cuda")
    for p in perf.parameters():
        if p.name == "CUDA.cache_gbs":  # device memory, not a shared buffer: never read
            assert not perf.cache_maintenance
            continue
        assert p.source and p.source != DEFAULT_SOURCE and not p.source.startswith("assumed: kzlab"), p.name
        assert p.uncertain, p.name
    values = {p.name.removeprefix("CUDA."): p for p in perf.parameters()}
    for key, (low, high) in PEAKS.items():
        p = values[key]
        assert p.high >= high and p.low < low, (key, p.low, p.high)
    assert values["launch_us"].low <= 5 <= values["launch_us"].high  # a kernel launch: a few microseconds
    assert caps.memory["budget_bytes"] == 80_000_000_000


def test_seed_prediction_beats_the_cpu(qwen_full):
    """The seed case (full-size F16 decoder, 31 frames, the default lowering's device graph) on an H100: one split,
    and a p50 (and even a p90) far below the CPU decode measured here, priced from cited figures only."""
    pl = kzlab.simulate(qwen_full, "cuda", frames=31, predict=True)
    assert pl.n_splits == 1
    pred = pl.predicted
    assert pred.total_ms < CPU_SEED_MS / 5, pred.summary()
    assert pred.range["p90"] < CPU_SEED_MS, pred.summary()
    assert not [n for n in pred.assumed if n.startswith("CUDA.")], pred.assumed
    assert pl.memory["CUDA"].budget_bytes == 80_000_000_000 and pl.memory["CUDA"].fits


def test_depthwise_kernel_layouts():
    """ggml-cuda's CONV_2D_DW kernel (conv2d-dw.cu eced84c8 lines 119-161) runs WHCN on a contiguous input, CWHN on a
    channels-contiguous one reading the weights channels innermost, and aborts on anything else: kzlab's layout
    (the WavTokenizer depthwise conv's) is the CWHN one."""
    from kzlab.analysis.placement.rules import cuda_conv2d_dw_kernel_layout as check

    ctx = g.ggml_init(g.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True))
    try:
        C, T, K = 8, 16, 7
        x = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, C, T)  # channels-last activations, ne [C, T]
        w = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, C, K)  # the weight as stored, ne [C, K]
        cwhn_x = g.ggml_permute(ctx, g.ggml_reshape_4d(ctx, x, C, T, 1, 1), 2, 0, 1, 3)
        cwhn_w = g.ggml_permute(ctx, g.ggml_reshape_4d(ctx, w, C, 1, 1, K), 3, 1, 2, 0)
        assert check(g.ggml_conv_2d_dw_direct(ctx, cwhn_w, cwhn_x, 1, 1, 3, 0, 1, 1)) is None
        plain_w = g.ggml_new_tensor_4d(ctx, g.GGML_TYPE_F32, K, 1, 1, C)  # WHCN weights with a CWHN input
        assert "channels innermost" in check(g.ggml_conv_2d_dw_direct(ctx, plain_w, cwhn_x, 1, 1, 3, 0, 1, 1))
        plain_x = g.ggml_new_tensor_4d(ctx, g.GGML_TYPE_F32, T, 1, C, 1)
        assert check(g.ggml_conv_2d_dw_direct(ctx, plain_w, plain_x, 1, 1, 3, 0, 1, 1)) is None
        strided = g.ggml_view_4d(ctx, plain_x, T // 2, 1, C, 1, 8, 4 * T, 4 * T, 0)  # every other frame
        assert "line 159" in check(g.ggml_conv_2d_dw_direct(ctx, plain_w, strided, 1, 1, 3, 0, 1, 1))
    finally:
        g.ggml_free(ctx)
