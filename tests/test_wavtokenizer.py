"""WavTokenizer's decoder (llama.cpp's `wavtokenizer-dec` GGUF) against the PyTorch reference, stage by stage.

The fixture (tests/data/wavtokenizer-tiny, see PROVENANCE.md) holds every stage's activation from outetts'
PyTorch decoder. Bounds on the default lowering: F32 >= 70 dB at every stage, F16 weights >= 40 dB, Q8_0 >= 25 dB;
the in-graph iSTFT agrees with the host one to >= 70 dB. The float32 ggml kernels differ from PyTorch's only by
rounding (sums in another order), which lands near 100 dB here, so 70 dB leaves room for any CPU and thread count.
"""

from __future__ import annotations

from pathlib import Path

import conftest
import numpy as np
import pytest

import kzlab
from kzlab.audio import snr_db
from kzlab.errors import InvalidInputError, InvalidModelError

DATA = Path(__file__).parent / "data" / "wavtokenizer-tiny"
GGUF = DATA / "wavtokenizer-tiny-f32.gguf"


@pytest.fixture(scope="module")
def ref():
    return dict(np.load(DATA / "reference.npz"))


def stage_snrs(dec, ref) -> dict[str, float]:
    return conftest.stage_snrs(dec, ref, skip=("codes", "posnet"), every=True)


def test_family_and_sizes_are_read_from_the_file():
    m = kzlab.load_model(GGUF)
    hp = m.hparams
    assert m.family == "wavtokenizer-dec" and m.layout == "wavtokenizer-llama"
    assert (hp.vocab_size, hp.features, hp.dim, hp.intermediate_size, hp.num_convnext) == (512, 32, 64, 192, 3)
    assert hp.posnet_kinds == ("resnet", "resnet", "attn", "resnet", "resnet", "norm")
    assert (hp.n_fft, hp.hop, hp.group_norm_groups) == (1280, 320, 32)
    assert m.info()["family"] == "wavtokenizer-dec"


@pytest.mark.parametrize("wtype,bound", [("f32", 70.0), ("f16", 40.0), ("q8_0", 25.0)])
def test_every_stage_matches_the_reference(ref, wtype, bound):
    with kzlab.load(GGUF, backend="cpu", threads=2, wtype=wtype) as dec:
        snr = stage_snrs(dec, ref)
    low = {k: round(v, 1) for k, v in snr.items() if v < bound}
    assert not low, f"{wtype}: stages under {bound} dB: {low} (all: {snr})"


@pytest.mark.parametrize("conv", ["ktap", "ktap-acc", "im2col-f32"])
@pytest.mark.parametrize("src1", ["data", "kernel"])
def test_every_conv_lowering_of_the_portable_graph_matches_the_reference(ref, conv, src1):
    """The 'same' convs as K shifted products (one PAD of both ends, or ACC with no padded copy) and as an im2col,
    either operand as src1: every stage within the F32 bound, at 1 and 2 threads."""
    for threads in (1, 2):
        with kzlab.load(GGUF, backend="cpu", threads=threads, mode="portable", conv=conv, conv_src1=src1) as dec:
            assert (dec.lowering.conv, dec.lowering.conv_src1) == (conv, src1)
            snr = stage_snrs(dec, ref)
        low = {k: round(v, 1) for k, v in snr.items() if v < 70.0}
        assert not low, f"{conv}, src1={src1}, {threads} threads: stages under 70 dB: {low}"


def test_in_graph_istft_agrees_with_the_host_one(ref):
    with kzlab.load(GGUF, backend="cpu", threads=2, wtype="f32") as host:
        a = host.decode(ref["codes"])
    with kzlab.load(GGUF, backend="cpu", threads=2, wtype="f32", istft="graph") as graph:
        b = graph.decode(ref["codes"][0])  # (T,) codes for a one-codebook family
    assert a.shape == b.shape == (32000,)
    assert snr_db(b, a) >= 70.0
    assert snr_db(b, ref["wav"]) >= 70.0


def test_the_host_istft_is_a_proper_inverse_real_fft(ref):
    from kzlab.arch.wavtokenizer.istft import istft

    assert snr_db(istft(ref["head.linear"], 1280, 320), ref["wav"]) >= 100.0


def test_llama_cpp_like_lowering_is_reported_not_hidden(ref):
    """F16 im2col and tanh GELU (what llama.cpp's graph does) cost accuracy; the figures are what they are, but
    they stay well above the F16 bound and below the default's."""
    with kzlab.load(GGUF, backend="cpu", threads=2, wtype="f32", conv="im2col-f16", gelu="tanh") as dec:
        snr = stage_snrs(dec, ref)
    assert 40.0 <= snr["head.linear"] < 90.0, snr


def test_bad_codes_are_refused_before_ggml(ref):
    with kzlab.load(GGUF, backend="cpu", threads=1) as dec:
        with pytest.raises(InvalidInputError, match="out of range"):
            dec.decode(np.array([[0, 512]]))
        with pytest.raises(InvalidInputError, match=r"shape \[1, T\]"):
            dec.decode(np.zeros((2, 5), dtype=np.int32))


def test_missing_and_misshaped_tensors_are_refused(tmp_path):
    from kzlab.formats import reader
    from kzlab.formats.layout import get_layout
    from kzlab.loader import model_from_mapping

    raw = reader.read(GGUF)
    lm = get_layout("wavtokenizer-llama")
    mapping, _ = lm.apply(raw.tensors)
    gone = {k: v for k, v in mapping.items() if k != "convnext.1.pw2.weight"}
    with pytest.raises(InvalidModelError, match="convnext.1.pw2.weight"):
        model_from_mapping(raw, lm.name, gone, [], family="wavtokenizer-dec")
    swapped = dict(mapping, **{"posnet.0.conv1.weight": mapping["conv1d.weight"]})
    with pytest.raises(InvalidModelError, match="posnet.0.conv1"):
        model_from_mapping(raw, lm.name, swapped, [], family="wavtokenizer-dec")


def test_a_gguf_of_another_family_is_refused_by_name(tmp_path):
    import gguf

    p = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(kzlab.KzlabError, match=r"is a 'llama' file; kzlab decodes: qwen3-tts-12hz, wavtokenizer-dec"):
        kzlab.load_model(p)


def test_cli_info_and_decode(tmp_path, capsys, ref):
    from kzlab.cli import main

    assert main(["info", str(GGUF)]) == 0
    out = capsys.readouterr().out
    assert "family      wavtokenizer-dec" in out and "convnext    3 blocks, 64 -> 192 -> 64" in out
    codes = tmp_path / "codes.npy"
    np.save(codes, ref["codes"][0])  # (T,)
    wav = tmp_path / "out.npy"
    assert main(["decode", str(GGUF), "--codes", str(codes), "-o", str(tmp_path / "o.wav"), "--npy", str(wav),
                 "--backend", "cpu", "--threads", "2"]) == 0
    assert snr_db(np.load(wav), ref["wav"]) >= 70.0


def test_the_fused_dwmlp_node_is_the_fast_mode_and_the_plan_says_which_ran(monkeypatch):
    """The family's fused CPU nodes are the ConvNeXt block and the normalised conv: `auto` on the CPU resolves to the
    fast plan with both (the ConvNeXt node in a build where it pays: ggml's GELU_ERF scalar, set here), the options
    each would override keep the ggml ops, and the first family's fused options, which this decoder has nothing
    for, resolve to ops and are refused when asked for."""
    from kzlab.errors import InvalidOptionError
    from kzlab.graph import options

    monkeypatch.setattr(options, "_dwmlp_node_pays", lambda: True)

    m = kzlab.load_model(GGUF)
    with kzlab.Decoder(m, backend="cpu", sched=False) as d:
        plan = d.session.plan
        assert plan.mode == "fast" and plan.dwmlp == "fused" and plan.normconv == "fused"
        assert (plan.snake, plan.resunit, plan.convt, plan.unitconv) == ("folded", "ops", "col2im", "direct")
        assert "dwmlp=fused" in repr(d) and "normconv=fused" in repr(d)
    # the ConvNeXt node's own options leave the normalised convs fused; a weight type or the portable mode neither
    for kw, normconv in (({"gelu": "tanh"}, "fused"), ({"dwconv": "taps"}, "fused"), ({"wtype": "f16"}, "ops"),
                         ({"mode": "portable"}, "ops")):
        with kzlab.Decoder(m, kzlab.Lowering(**kw), backend="cpu", sched=False) as d:
            plan = d.session.plan
            assert plan.dwmlp == "ops" and plan.normconv == normconv, kw
            assert plan.mode == ("fast" if normconv == "fused" else "portable"), kw
    with pytest.raises(InvalidOptionError, match="no SnakeBeta"):
        kzlab.Decoder(m, kzlab.Lowering(snake="fused"), backend="cpu", sched=False)
    with pytest.raises(InvalidOptionError, match="unitconv='winograd'.*no BigVGAN residual units"):
        kzlab.Decoder(m, kzlab.Lowering(unitconv="winograd"), backend="cpu", sched=False)
    with pytest.raises(InvalidOptionError, match="mode='portable' builds ggml ops only"):
        kzlab.Decoder(m, kzlab.Lowering(dwmlp="fused", mode="portable"), backend="cpu", sched=False)


# ---- files: kzlab convert, synth and built-in names for this family --------------------------------------------
@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """`kzlab convert` of the fixture, per outtype (the family's own writer: llama.cpp's layout)."""
    from kzlab.app.convert import convert

    d = tmp_path_factory.mktemp("wt-convert")
    return {t: convert(GGUF, d / f"wt-{t}.gguf", outtype=t, progress=False) for t in ("f32", "f16", "q8_0")}


def _kv_and_tensors(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    kv = {
        k: (f.types[0].name if f.types else None, f.contents())
        for k, f in r.fields.items()
        if not k.startswith("GGUF.")
    }
    ts = {t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape), t.data.tobytes()) for t in r.tensors}
    return kv, ts


def test_converted_f32_is_llama_cpp_s_own_file(converted):
    """Written F32, the file has llama.cpp's converter's tensors (names, ggml shapes, bytes) and metadata (keys,
    types, values); only the name and kzlab's provenance keys differ."""
    kv_ref, ts_ref = _kv_and_tensors(GGUF)
    kv, ts = _kv_and_tensors(converted["f32"])
    assert ts == ts_ref
    differ = {k for k in set(kv) | set(kv_ref) if kv.get(k) != kv_ref.get(k)}
    assert differ == {"general.name", "kzlab.source", "kzlab.source_layout"}, differ


@pytest.mark.parametrize("outtype,bound,types", [
    ("f16", 40.0, {"F16", "F32"}), ("q8_0", 25.0, {"Q8_0", "F16", "F32"}),
])
def test_converted_files_decode_within_the_bounds_at_every_stage(converted, ref, outtype, bound, types):
    """F16 and Q8_0 as llama.cpp's converter stores them: biases, norms and gamma F32; Q8_0 where blocks of 32
    divide a row, F16 elsewhere (the k=3/k=7 convs, the 1x1 attention convs)."""
    m = kzlab.load_model(converted[outtype])
    assert m.layout == "wavtokenizer-llama" and set(m.dtype_histogram()) == types
    assert m.metadata["general.file_type"] == {"f16": 1, "q8_0": 7}[outtype]
    w = m.weights
    assert w["posnet.0.norm1.weight"].type == w["convnext.0.gamma"].type == w["output.bias"].type == "F32"
    assert w["posnet.0.conv1.weight"].type == "F16"
    assert w["convnext.0.pw1.weight"].type == {"f16": "F16", "q8_0": "Q8_0"}[outtype]
    with kzlab.load(converted[outtype], backend="cpu", threads=2) as dec:
        snr = stage_snrs(dec, ref)
    low = {k: round(v, 1) for k, v in snr.items() if v < bound}
    assert not low, f"{outtype}: stages under {bound} dB: {low} (all: {snr})"


def test_builtin_names_of_this_family():
    from kzlab.formats.named import builtin_path, registry

    assert {"wavtokenizer-tiny", "wavtokenizer-synthetic", "tiny", "synthetic"} <= set(registry())
    p = builtin_path("wavtokenizer-tiny")
    assert p.is_file() and p.read_bytes() == GGUF.read_bytes()  # the package data is the fixture
    m = kzlab.load_model("wavtokenizer-tiny")
    assert m.family == "wavtokenizer-dec" and m.path == p
    with kzlab.load("wavtokenizer-tiny", backend="cpu", threads=1) as dec:
        assert dec.decode(np.zeros(4, dtype=np.int32)).shape == (4 * 320,)


def test_synth_family_full_size(tmp_path, capsys):
    """`kzlab synth --family wavtokenizer`: the shipped shapes in llama.cpp's layout, activations of order 1 at
    every stage, a finite waveform."""
    from kzlab.cli import main

    out = tmp_path / "wt-synth.gguf"
    assert main(["synth", "--family", "wavtokenizer", "--dtype", "f16", "-o", str(out)]) == 0
    assert "parameters" in capsys.readouterr().out
    m = kzlab.load_model(out)
    hp = m.hparams
    assert m.layout == "wavtokenizer-llama" and m.architecture == "wavtokenizer-dec"
    assert (hp.vocab_size, hp.features, hp.dim, hp.intermediate_size, hp.num_convnext, hp.n_fft) == (
        4096, 512, 768, 2304, 12, 1280
    )
    assert hp.posnet_kinds == ("resnet", "resnet", "attn", "resnet", "resnet", "norm")
    assert m.metadata["wavtokenizer-dec.block_count"] == 12 and m.metadata["tokenizer.ggml.model"] == "none"
    codes = np.random.default_rng(0).integers(0, 4096, size=(1, 40)).astype(np.int32)
    with kzlab.load(out, backend="cpu", threads=2) as dec:
        o = dec.decode(codes, intermediates=True)
    assert o.wav.shape == (40 * 320,) and np.isfinite(o.wav).all() and 0.01 < float(np.std(o.wav)) < 1.0
    for k, v in o.stages.items():
        assert np.isfinite(v).all() and 0.3 < float(np.std(v)) < 5.0, (k, float(np.std(v)))


# ---- layout inference ------------------------------------------------------------------------------------------
#: the fixture's names -> PyTorch-like ones (outetts' module names), the file order reversed
RENAME = [
    (r"token_embd\.weight", "quantizer.vq.codebook.embed"),
    (r"conv1d\.(weight|bias)", r"backbone.embed.\1"),
    (r"token_embd_norm\.(weight|bias)", r"backbone.norm_in.\1"),
    (r"output_norm\.(weight|bias)", r"backbone.norm_out.\1"),
    (r"output\.(weight|bias)", r"head.out.\1"),
    (r"posnet\.(\d+)\.attn_norm\.(weight|bias)", r"backbone.pos_net.\1.norm.\2"),
    (r"posnet\.(\d+)\.attn_(q|k|v)\.(weight|bias)", r"backbone.pos_net.\1.\2.\3"),
    (r"posnet\.(\d+)\.attn_output\.(weight|bias)", r"backbone.pos_net.\1.proj_out.\2"),
    (r"posnet\.(\d+)\.(\w+)\.(weight|bias)", r"backbone.pos_net.\1.\2.\3"),
    (r"convnext\.(\d+)\.dw\.(weight|bias)", r"backbone.convnext.\1.dwconv.\2"),
    (r"convnext\.(\d+)\.norm\.weight", r"backbone.convnext.\1.norm.scale"),
    (r"convnext\.(\d+)\.norm\.bias", r"backbone.convnext.\1.norm.shift"),
    (r"convnext\.(\d+)\.pw(1|2)\.(weight|bias)", r"backbone.convnext.\1.pwconv\2.\3"),
    (r"convnext\.(\d+)\.gamma\.weight", r"backbone.convnext.\1.gamma"),
]


def _renamed(path, out, architecture="wavtokenizer-dec"):
    """A copy of a GGUF with every tensor renamed (RENAME), in reverse order, metadata kept."""
    import re

    import gguf

    r = gguf.GGUFReader(str(path))
    w = gguf.GGUFWriter(str(out), architecture)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        sub = f.types[1] if len(f.types) > 1 else None
        w.add_key_value(k, f.contents(), f.types[0], sub)
    names = {}
    for t in reversed(r.tensors):
        new = next(re.sub(rx, to, t.name) for rx, to in RENAME if re.fullmatch(rx, t.name))
        names[t.name] = new
        w.add_tensor(new, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return names


def test_layout_infer_maps_renamed_tensors_back(tmp_path):
    """A file whose tensors no layout map names is mapped by structure to exactly the roles llama.cpp's names
    have, whatever its label; it then loads and decodes as the original does."""
    from kzlab.formats import reader
    from kzlab.formats.infer import infer_layout
    from kzlab.formats.layout import get_layout

    want, _ = get_layout("wavtokenizer-llama").apply(reader.read(GGUF).tensors)
    for label in ("wavtokenizer-dec", "my-vocoder"):
        p = tmp_path / f"renamed-{label}.gguf"
        names = _renamed(GGUF, p, label)
        prop = infer_layout(p)
        got = {a.role: a.tensor for a in prop.assignments}
        assert got == {role: names[t] for role, t in want.items()}, label
        assert not prop.unused and prop.layout.family == "wavtokenizer-dec"
        assert "6 posnet blocks" in prop.summary() and "3 ConvNeXt blocks" in prop.summary()
    with pytest.warns(UserWarning, match="unknown tensor names"):
        m = kzlab.load_model(p)
    assert m.family == "wavtokenizer-dec" and m.layout.startswith("inferred-")
    codes = np.arange(0, 512, 37, dtype=np.int32)[None, :]
    with kzlab.load(GGUF, backend="cpu", threads=1) as a, kzlab.load(m.path, backend="cpu", threads=1) as b:
        wa, wb = a.decode(codes), b.decode(codes)
    assert snr_db(wb, wa) >= 100.0  # the same weights through the same graph


def test_layout_infer_cli_writes_a_map_that_loads(tmp_path):
    from kzlab.cli import main

    p = tmp_path / "renamed.gguf"
    _renamed(GGUF, p)
    toml = tmp_path / "map.toml"
    assert main(["layout", "infer", str(p), "-o", str(toml)]) == 0
    m = kzlab.load_model(p, layout=str(toml))
    assert m.family == "wavtokenizer-dec" and len(m.weights) == 80


def test_layout_infer_refuses_what_it_cannot_tell_apart(tmp_path):
    """Two norms named alike (no word for in or out, no shared prefix with the codebook or head): refused,
    naming them, never guessed."""
    import re

    global RENAME
    saved = RENAME
    try:
        RENAME = [(r"token_embd_norm\.(weight|bias)", r"backbone.norm_a.\1"),
                  (r"output_norm\.(weight|bias)", r"backbone.norm_b.\1")] + saved
        p = tmp_path / "ambiguous.gguf"
        _renamed(GGUF, p)
    finally:
        RENAME = saved
    from kzlab.errors import LayoutError
    from kzlab.formats.infer import infer_layout

    with pytest.raises(LayoutError, match=re.escape("backbone.norm_a")):
        infer_layout(p)


def _convnext_block_numpy(x: np.ndarray, t: dict, i: int, eps: float) -> np.ndarray:
    """One ConvNeXt block in float64 numpy from the GGUF's tensors (x channel-first (C, T)): depthwise conv k=7
    zero 'same' padding, LayerNorm over channels, Linear, exact GELU, Linear, gamma, residual."""
    from math import erf

    p = f"convnext.{i}."
    w = t[p + "dw.weight"].reshape(x.shape[0], -1)  # (C, K)
    k = w.shape[1]
    xp = np.pad(x, ((0, 0), (k // 2, k // 2)))
    h = sum(w[:, j : j + 1] * xp[:, j : j + x.shape[1]] for j in range(k)) + t[p + "dw.bias"].reshape(-1, 1)
    h = h.T  # (T, C)
    h = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + eps) * t[p + "norm.weight"]
    h = h + t[p + "norm.bias"]
    h = h @ t[p + "pw1.weight"].T + t[p + "pw1.bias"]
    h = 0.5 * h * (1.0 + np.vectorize(erf)(h / np.sqrt(2.0)))
    h = (h @ t[p + "pw2.weight"].T + t[p + "pw2.bias"]) * t[p + "gamma.weight"]
    return x + h.T


@pytest.mark.parametrize("frames", [1, 2, 3, 8])
def test_convnext_block_on_short_inputs(ref, frames):
    """The depthwise conv's lowering depends on the frame count (a single frame takes another node): a ConvNeXt
    block of a short decode equals the block computed in numpy from the stage before it, in the same run."""
    import gguf

    r = gguf.GGUFReader(str(GGUF))
    t = {x.name: np.array(x.data, dtype=np.float64) for x in r.tensors if x.name.startswith("convnext.0.")}
    with kzlab.load(GGUF, backend="cpu", threads=2, wtype="f32") as dec:
        out = dec.decode(ref["codes"][:, :frames], intermediates=True)
        eps = dec.model.hparams.layer_norm_eps
    x = np.asarray(out.stages["backbone.norm"], dtype=np.float64).reshape(-1, frames)
    want = _convnext_block_numpy(x, t, 0, eps)
    got = np.asarray(out.stages["convnext.0"]).reshape(want.shape)
    assert snr_db(got, want) >= 100.0  # float32 rounding of one block: ~130 dB


def test_depthwise_taps_lowering_matches_and_places_on_the_npu(ref):
    """`dwconv="taps"` (MUL + ADD, what a device takes) gives the same stages as the direct CONV_2D_DW node, and
    the Hexagon what-if then keeps the depthwise convs on the NPU instead of sending them to the CPU."""
    with kzlab.load(GGUF, lowering=kzlab.Lowering(dwconv="taps"), backend="cpu", threads=2) as dec:
        snr = stage_snrs(dec, ref)
    assert min(snr.values()) >= 70.0, snr
    direct = kzlab.simulate(GGUF, "hexagon-v0.15.3", frames=20)
    taps = kzlab.simulate(GGUF, "hexagon-v0.15.3", frames=20, dwconv="taps")
    on = {pl: {n.backend for n in p.nodes if n.layer.endswith(".dwconv") and n.op not in ("VIEW", "RESHAPE",
                                                                                          "PERMUTE", "TRANSPOSE")}
          for pl, p in (("direct", direct), ("taps", taps))}
    assert "CPU" in on["direct"] and on["taps"] == {"HTP"}, on
    assert any("CONV_2D_DW" in n.reason for n in direct.nodes if n.op == "CONV_2D_DW")
    assert "dwconv=taps" in taps.config["lowering_label"]
