"""Mimi's decoder under ggml-hexagon v0.21.0, placed node by node, and the `+ELU` what-if priced.

ggml-org/ggml 8599e0ea (v0.21.0) src/ggml-hexagon/ggml-hexagon.cpp, ggml_backend_hexagon_device_supports_op
(lines 4062-4233): the UNARY switch (lines 4126-4141) names NEG, EXP, SIGMOID, SOFTPLUS, TANH, SILU, GELU and
GELU_QUICK, so ELU (the SEANet's activation) falls to its default and is refused, as are SIN, CONV_TRANSPOSE_1D
and COL2IM_1D (the outer switch's default); MUL_MAT (4093), NORM (4105), SOFT_MAX (4122), ROPE (4155) and GELU are
accepted under their rules (the profile leaves out FLASH_ATTN_EXT, 4159, which the graph does not build: its
attention is products and a SOFT_MAX). The synthetic tiny decoder (preset `mimi-tiny`) is built once; nothing is
computed but the what-if's CPU profile and emulated decode of four frames.
"""

from __future__ import annotations

import pytest

import kzlab
from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.capabilities import load_changed
from kzlab.formats.synth import synth

PROFILE = "hexagon-v0.21.0"
FRAMES = 4
#: the stage names the Mimi graph gives its transformer's blocks (transformer.0, transformer.1, ...)
TRANSFORMER = "transformer."
VIEWS = ("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")

pytestmark = pytest.mark.usefixtures("isolated_cache")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = synth(tmp_path_factory.mktemp("mimi") / "mimi-tiny-f16.gguf", preset="mimi-tiny", dtype="f16")
    return kzlab.load_model(path)


@pytest.fixture(scope="module")
def placed(model):
    return kzlab.simulate(model, PROFILE, frames=FRAMES)


@pytest.fixture(scope="module")
def elu_placed(model):
    return kzlab.simulate(model, load_changed(PROFILE, "+ELU"), frames=FRAMES, predict={"draws": 100})


def expected_elus(hp) -> int:
    """The SEANet's ELUs: one before each upsampling block's transposed conv, two in each of its residual units,
    one before the last conv."""
    return len(hp.ratios) * (1 + 2 * hp.residual_layers) + 1


@pytest.mark.parametrize("op, accepted", [
    ("ELU", False), ("SIN", False), ("CONV_TRANSPOSE_1D", False), ("COL2IM_1D", False), ("GELU_ERF", False),
    ("MUL_MAT", True), ("ROPE", True), ("NORM", True), ("GELU", True), ("SOFT_MAX", True),
])
def test_the_profile_lists_what_supports_op_accepts(op, accepted):
    caps = capabilities.load(PROFILE)
    assert caps.default == "refuse"
    assert (op in caps.ops) is accepted, op


def test_every_elu_stays_on_the_cpu(model, placed):
    elus = [n for n in placed.nodes if n.op == "ELU"]
    assert len(elus) == expected_elus(model.hparams)
    assert all(n.backend == "CPU" for n in elus)
    assert all(n.refused["HTP"].startswith("not-listed") for n in elus)
    assert all(n.stage.startswith("decoder.") for n in elus)


def test_the_transformer_runs_on_the_htp(model, placed):
    products = [n for n in placed.nodes if n.op == "MUL_MAT" and n.name.startswith("tfm.blk.")]
    # per block: q, k, v, the scores, the weighted values, the output projection, the MLP's two products
    assert len(products) == 8 * model.hparams.num_layers
    assert all(n.backend == "HTP" for n in products)
    inside = [n for n in placed.nodes if n.stage.startswith(TRANSFORMER) and n.op not in VIEWS]
    for op in ("NORM", "ROPE", "SOFT_MAX"):
        assert any(n.op == op for n in inside) and all(n.backend == "HTP" for n in inside if n.op == op), op
    # the exact GELU (kyutai/mimi's) is the one op of the blocks the HTP refuses
    assert {n.op for n in inside if n.backend == "CPU"} <= {"GELU_ERF"}


def test_a_direct_transposed_conv_stays_on_the_cpu(model):
    pl = kzlab.simulate(model, PROFILE, frames=FRAMES, convt="direct")
    convt = [n for n in pl.nodes if n.op == "CONV_TRANSPOSE_1D"]
    assert len(convt) == len(model.hparams.ratios) and all(n.backend == "CPU" for n in convt)


def test_plus_elu_moves_the_elus_to_the_htp_and_prices_them(model, placed, elu_placed):
    assert elu_placed.config["profile"] == f"{PROFILE} (+ELU)" and elu_placed.config["profile_changes"] == ["+ELU"]
    elus = [n for n in elu_placed.nodes if n.op == "ELU"]
    assert len(elus) == expected_elus(model.hparams) and all(n.backend == "HTP" for n in elus)
    assert elu_placed.n_splits < placed.n_splits
    rows = [r for r in elu_placed.predicted.nodes if r["op"] == "ELU"]
    assert len(rows) == len(elus)
    for r in rows:
        assert r["backend"] == "HTP" and r["ms"] > 0
        assert r["rate"] == "HTP.gflops.transcendental" and r["bandwidth"] == "HTP.bandwidth_gbs.transcendental"
    params = {p.name: p for p in elu_placed.predicted.parameters}
    for name in ("HTP.gflops.transcendental", "HTP.bandwidth_gbs.transcendental"):
        assert "GELU on HVX" in params[name].source and params[name].uncertain, name


def test_the_what_if_names_the_basis_of_the_elu_price(model):
    r = kzlab.whatif(model, [f"v0.21.0={PROFILE}", f"elu={PROFILE},+ELU"], frames=FRAMES, cpu_baseline_ms=200.0,
                     draws=200, seed=1, threads=1)
    d = r.to_dict()
    assert d["configs"]["elu"]["profile"] == f"{PROFILE} (+ELU)"
    note = next(n for n in d["notes"] if "+ELU" in n)
    assert "is a what-if" in note and "HTP.gflops.transcendental" in note and "HTP.bandwidth_gbs.transcendental" in note
    assert f"its {expected_elus(model.hparams)} node(s) on HTP" in note
    assert all(n.backend == "HTP" for n in r.placements["elu"].nodes if n.op == "ELU")
    assert all(n.backend == "CPU" for n in r.placements["v0.21.0"].nodes if n.op == "ELU")
    # the ELUs' CPU time leaves the CPU
    assert d["configs"]["elu"]["p50_ms"]["CPU"] < d["configs"]["v0.21.0"]["p50_ms"]["CPU"]
