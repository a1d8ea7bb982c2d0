"""ggml-hexagon computes ggml's GELU as GELU_QUICK, x * sigmoid(1.702 x), in every release the profiles cover.

The host maps GGML_UNARY_OP_GELU and GELU_QUICK to one DSP op (ggml-org/ggml 8599e0ea = v0.21.0,
src/ggml-hexagon/ggml-hexagon.cpp 3472-3473; 707321c4 = v0.15.2 3259-3260; eced84c8 = v0.15.3 3214-3215; 78c531d4
3478-3479), supports_op accepts GELU (8599e0ea 4134-4136) and refuses GELU_ERF (the switch's default), and the DSP
computes x * sigmoid(1.702 x) for it (htp/unary-ops.c @ 8599e0ea 295-310 and 761-766; htp/act-ops.c @ 707321c4 and
eced84c8 380-383), where ggml's GELU is the tanh form (ggml-cpu/vec.h 968-969). The profiles record it as a defect
of kind "approximation": the nodes are marked, and whether the audio is still right is the emulated decode's SNR
against the bound. A decoder whose GELU is the erf form (GELU_ERF) keeps it on the CPU and is not touched.

Everything here decodes four frames of tiny decoders: the PocketTTS synthetic F16 decoder (its transformer's MLP
is ggml_gelu) and the first family's built-in tiny decoder, whose GELU form is a lowering option.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import ask_whatif

import kzlab
from kzlab.analysis.emulate import htp as kernels
from kzlab.analysis.emulate.device import emulate
from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.capabilities import load_changed
from kzlab.errors import InvalidInputError
from kzlab.formats.synth import synth

PROFILE = "hexagon-v0.21.0"
DEFECT = "gelu-as-gelu-quick"
FRAMES = 4
BOUND = 40.0
#: per profile: its commit, the host's GELU -> DSP op lines, the DSP kernel's lines
SOURCES = {
    "hexagon-v0.15.2": ("707321c4", "ggml-hexagon.cpp 3259-3260", "act-ops.c 380-383"),
    "hexagon-v0.15.3": ("eced84c8", "ggml-hexagon.cpp 3214-3215", "act-ops.c 380-383"),
    "hexagon-v0.21.0": ("8599e0ea", "ggml-hexagon.cpp 3472-3473", "unary-ops.c 295-310"),
    "hexagon-78c531d": ("78c531d4", "ggml-hexagon.cpp 3478-3479", "unary-ops.c 295-310"),
}

pytestmark = pytest.mark.usefixtures("isolated_cache")


def gelu_quick(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / (1.0 + np.exp(-1.702 * x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * x * (1.0 + 0.044715 * x * x)))


def gelus(pl, op: str = "GELU") -> list:
    return [n for n in pl.nodes if n.op == op]


@pytest.fixture(scope="module")
def pockettts(tmp_path_factory):
    path = synth(tmp_path_factory.mktemp("gelu") / "p.gguf", preset="pockettts-mimi-tiny", dtype="f16")
    return kzlab.load_model(path)


@pytest.fixture(scope="module")
def placed(pockettts):
    return kzlab.simulate(pockettts, PROFILE, frames=FRAMES)


@pytest.fixture(scope="module")
def answer(pockettts):
    return ask_whatif(pockettts, ["v21=" + PROFILE])


@pytest.fixture(scope="module")
def qwen3():
    return kzlab.load_model("tiny")


# ---- the profiles ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("profile", sorted(SOURCES))
def test_every_hexagon_profile_records_the_defect_with_its_source(profile):
    caps = capabilities.load(profile)
    d = next(x for x in caps.defects if x["id"] == DEFECT)
    commit, host_lines, kernel_lines = SOURCES[profile]
    assert d["op"] == "GELU" and d["kind"] == "approximation" and d["when"] == "every_node"
    assert d["source"].startswith(f"ggml-org/ggml {commit}")
    assert host_lines in d["source"] and kernel_lines in d["source"] and "vec.h 963-969" in d["source"]
    assert "x * sigmoid(1.702 x)" in d["title"] and "1c73b80a" in d["versions"]
    assert d["remedies"] == ["-GELU"]
    # supports_op takes GELU and refuses GELU_ERF (the switch's default); the release's GELU kernel is emulated
    assert "GELU" in caps.ops and "GELU_ERF" not in caps.ops and caps.default == "refuse"
    assert kernels.emulated_kind("GELU", "", caps.arith) == "unary"


@pytest.mark.parametrize("profile", ["cpu", "cuda", "rpc", "blas"])
def test_other_backends_carry_no_such_defect(profile):
    assert not any(d["id"] == DEFECT for d in capabilities.load(profile).defects)


# ---- the emulated kernel --------------------------------------------------------------------------------------
@pytest.mark.parametrize("release", kernels.RELEASES)
def test_the_emulated_gelu_is_gelu_quick(release):
    x = np.concatenate([np.linspace(-12, 12, 24000), [-100.0, -60.0, -0.0, 1e-30, 60.0, 100.0]])
    x = x.astype(np.float32).reshape(6, -1)
    out = kernels.unary("GELU", kernels.Operand.from_array(x), release)
    assert out.dtype == np.float32 and out.shape == (1, 1, 6, x.shape[1])
    # x * sigmoid(1.702 x): the HTP's fast sigmoid (4^n N(f) / D(f), a Newton reciprocal) is within 6e-6 of the
    # exact one, about 50 F32 ulps; the multiplies around it are IEEE F32
    np.testing.assert_allclose(out.reshape(x.shape), gelu_quick(x), rtol=1e-5, atol=1e-35)
    steps = x * kernels.fast_sigmoid_f32(x * np.float32(1.702))
    np.testing.assert_array_equal(out.reshape(x.shape), steps)
    # not ggml's GELU: the tanh form is up to 0.02 away, near |x| = 2.3
    gap = np.abs(out.reshape(x.shape) - gelu_tanh(x))
    assert 0.019 < gap.max() < 0.022 and 2.2 < abs(float(x.reshape(-1)[gap.argmax()])) < 2.4
    # GELU_QUICK is the same DSP op
    np.testing.assert_array_equal(kernels.unary("GELU_QUICK", kernels.Operand.from_array(x), release), out)


def test_the_sigmoid_guards_and_strided_rows():
    s = kernels.fast_sigmoid_f32(np.array([np.nan, np.inf, -np.inf, 87, -87, 0], np.float32))
    np.testing.assert_array_equal(s, np.array([0, 1, 0, 1, 0, 0.5], np.float32))
    # v0.21.0 accepts an unpermuted, non-contiguous src0: its rows are read by their strides
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    raw = np.zeros((3, 64), np.float32)
    raw[:, :40] = x
    op = kernels.Operand(raw=raw.reshape(-1)[: 2 * 64 + 40].view(np.uint8), type="f32", ne=(40, 3, 1, 1),
                         nb=(4, 256, 768, 768))
    np.testing.assert_array_equal(kernels.unary("GELU", op, "v0.21.0").reshape(3, 40),
                                  kernels.unary("GELU", kernels.Operand.from_array(x), "v0.21.0").reshape(3, 40))


def test_what_the_htp_would_not_run_is_refused():
    x = np.ones((2, 32), np.float32)
    with pytest.raises(InvalidInputError, match="F32 src0"):
        kernels.unary("GELU", kernels.Operand.from_array(x, "f16"), "v0.21.0")
    with pytest.raises(InvalidInputError, match="not a pointwise op emulated"):
        kernels.unary("GELU_ERF", kernels.Operand.from_array(x), "v0.21.0")
    with pytest.raises(InvalidInputError, match="release"):
        kernels.unary("GELU", kernels.Operand.from_array(x), "v9")


# ---- the tiny PocketTTS decoder on v0.21.0 ------------------------------------------------------------------------
def test_its_gelus_are_marked_as_an_approximation(placed):
    nodes = gelus(placed)
    assert nodes and not gelus(placed, "GELU_ERF")
    assert all(n.backend == "HTP" and n.defect == DEFECT and n.defect_kind == "approximation" for n in nodes)
    assert not any(n.defect for n in placed.nodes if n.op != "GELU")
    # marked, but not wrong by itself: the emulated decode decides
    assert placed.defect_nodes == 0 and placed.approximate_nodes == len(nodes)
    assert sum(r["approximate_nodes"] for r in placed.stages) == len(nodes)
    assert sum(r["defect_nodes"] for r in placed.stages) == 0
    (row,) = placed.to_dict()["defects"]
    assert row["kind"] == "approximation" and sorted(row["nodes"]) == sorted(n.name for n in nodes)
    text = placed.summary()
    assert f"APPROXIMATION: {len(nodes)} node(s)" in text and "WRONG OUTPUT" not in text


def test_the_report_and_the_plot_show_them_apart_from_wrong_output(placed):
    from kzlab import plots
    from kzlab.report.render import defects_html

    n = len(gelus(placed))
    html = defects_html(placed)
    assert "approximates their op" in html and DEFECT in html and "Wrong output" not in html
    title = plots.placement(placed)._suptitle.get_text()
    assert f"{n} approximated" in title and "WRONG OUTPUT" not in title


def test_the_answer_is_the_measured_snr_against_the_bound(pockettts, placed, answer):
    d = answer.to_dict()
    c = d["configs"]["v21"]
    acc = c["accuracy"]
    n = len(gelus(placed))
    assert acc["emulated"] and acc["defect_nodes"] == 0 and acc["approximate_nodes"] == n
    snr = acc["snr_db"]
    assert isinstance(snr, float) and math.isfinite(snr)
    # the same figures as the emulated decode of that placement (the GELUs computed as the HTP computes them)
    # the what-if's codes and threads (ask_whatif: seed 1, one thread): the same arithmetic, the same bits
    res = emulate(pockettts, placement=answer.placements["v21"], seed=1, threads=1)
    assert {e.op for e in res.emulated} >= {"GELU"} and res.approximate_nodes == n and res.defect_nodes == 0
    assert snr == pytest.approx(res.snr_db, abs=1e-9)
    # decided by the bound: the HTP's GELU (GELU_QUICK) keeps every stage of this decoder above 40 dB
    assert c["correct"] is (res.first_stage_below is None)
    assert c["correct"] is True and snr >= BOUND
    assert DEFECT in c["why"] and f"within the {BOUND:g} dB bound" in c["why"]
    assert f"wav {snr:.1f} dB" in answer.summary()


def test_a_higher_bound_makes_it_wrong_and_the_decode_stops_there(pockettts, placed):
    res = emulate(pockettts, placement=placed, seed=1)  # the what-if's codes
    worst = min((s for s in res.stages if s.snr_db is not None), key=lambda s: s.snr_db)
    bound = math.ceil(worst.snr_db) + 1.0
    d = ask_whatif(pockettts, ["v21=" + PROFILE], bound=bound, remedies=False).to_dict()
    c = d["configs"]["v21"]
    assert c["correct"] is False and DEFECT in c["why"] and f"below {bound:g} dB" in c["why"]
    first = next(s.stage for s in res.stages if s.snr_db is not None and s.snr_db < bound)
    assert c["accuracy"]["first_stage_below"] == first and c["accuracy"]["stopped_at"] == first
    assert "the decode stopped there" in c["why"] and d["recommended"] != "v21"


def test_the_htp_gelu_reads_its_source_not_the_in_place_result(pockettts, placed, monkeypatch):
    """ggml allocates a unary op in place over its source: the emulated GELU must read its source before anything
    overwrites it (the node is not computed by ggml first), else it computes GELU_QUICK(GELU(x))."""
    from kzlab.analysis.emulate import device

    seen = []
    real = kernels.unary

    def unary(op, src0, release):
        seen.append(kernels.read(src0).reshape(-1))
        return real(op, src0, release)

    monkeypatch.setattr(device.kernels, "unary", unary)
    emulate(pockettts, placement=placed, seed=1)
    assert len(seen) == len(gelus(placed))
    # GELU(x) >= -0.1700 for every x: inputs below that are the sources, not GELU's results
    assert min(float(x.min()) for x in seen) < -0.5


def test_a_lower_bound_lets_it_through_and_no_emulation_does_not_know(pockettts, placed):
    res = emulate(pockettts, placement=placed, seed=1)  # the what-if's codes
    bound = math.floor(min(s.snr_db for s in res.stages if s.snr_db is not None)) - 1.0
    d = ask_whatif(pockettts, ["v21=" + PROFILE], bound=bound, remedies=False).to_dict()
    c = d["configs"]["v21"]
    assert c["correct"] is True and c["accuracy"]["approximate_nodes"] == len(gelus(placed))
    assert DEFECT in c["why"] and f"within the {bound:g} dB bound" in c["why"]
    assert d["recommended"] == "v21"
    d = ask_whatif(pockettts, ["v21=" + PROFILE], accuracy=False, remedies=False).to_dict()
    c = d["configs"]["v21"]
    assert c["correct"] is None and c["accuracy"]["emulated"] is False and DEFECT in c["why"]


def test_minus_gelu_keeps_them_on_the_cpu_and_is_right(pockettts, placed, answer):
    pl = kzlab.simulate(pockettts, load_changed(PROFILE, "-GELU"), frames=FRAMES)
    assert pl.config["profile"] == f"{PROFILE} (-GELU)"
    nodes = gelus(pl)
    assert len(nodes) == len(gelus(placed))
    assert all(n.backend == "CPU" and not n.defect for n in nodes) and pl.defects == []
    assert all("-GELU" in n.refused.get("HTP", "") for n in nodes)
    # the what-if prices it beside the configuration it fixes, on the same draws
    d = answer.to_dict()
    (v,) = d["configs"]["v21"]["correct_variants"]
    assert v["remedy"] == "-GELU" and v["correct"] is True
    c = d["configs"][v["name"]]
    assert c["accuracy"]["approximate_nodes"] == 0 and c["accuracy"]["snr_db"] >= BOUND and c["why"] == ""
    assert all(n.backend == "CPU" for n in gelus(answer.placements[v["name"]]))
    # both compute the right audio: the faster at p50 is recommended
    p50 = {k: d["configs"][k]["range"]["p50"] for k in ("v21", v["name"])}
    assert d["recommended"] == min(p50, key=p50.get)


# ---- the first family's tiny decoder ------------------------------------------------------------------------------
def test_an_erf_gelu_changes_nothing(qwen3):
    pl = kzlab.simulate(qwen3, PROFILE, frames=FRAMES)
    erf = gelus(pl, "GELU_ERF")
    assert erf and not gelus(pl) and all(n.backend == "CPU" for n in erf)
    assert pl.defects == [] and pl.approximate_nodes == 0
    minus = kzlab.simulate(qwen3, load_changed(PROFILE, "-GELU"), frames=FRAMES)
    assert [(n.name, n.backend, n.path) for n in minus.nodes] == [(n.name, n.backend, n.path) for n in pl.nodes]


def test_a_tanh_gelu_is_marked_and_judged(qwen3):
    pl = kzlab.simulate(qwen3, PROFILE, frames=FRAMES, gelu="tanh")
    nodes = gelus(pl)
    assert nodes and not gelus(pl, "GELU_ERF")
    assert all(n.backend == "HTP" and n.defect == DEFECT and n.defect_kind == "approximation" for n in nodes)
    assert pl.defect_nodes == 0 and pl.approximate_nodes == len(nodes)
    res = emulate(qwen3, placement=pl)
    assert res.approximate_nodes == len(nodes) and res.correct is (res.first_stage_below is None)
    fixed = emulate(qwen3, load_changed(PROFILE, "-GELU"), frames=FRAMES, gelu="tanh")
    assert fixed.correct and fixed.approximate_nodes == 0 and fixed.snr_db > res.snr_db
