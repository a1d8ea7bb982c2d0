"""Named lowerings (kzlab.graph.options.PRESETS): `llamacpp` builds llama.cpp's own ops for the decoder (ggml_conv_1d's
F16 im2col with the kernel as src1, col2im transposed convs, folded SnakeBeta, ggml_gelu's tanh form), so that
simulate and whatif price llama.cpp's graph; `--lowering NAME` starts from one and the options changed on top of it
apply."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import stages_below

import kzlab
from kzlab.cli import main
from kzlab.errors import InvalidOptionError


def test_presets_by_name_and_an_unknown_one_refused():
    low = kzlab.Lowering.preset("llamacpp")
    assert low is kzlab.LLAMACPP and low.mode == "portable"
    assert (low.conv, low.conv_src1, low.convt, low.snake, low.gelu) == ("im2col-f16", "kernel", "col2im",
                                                                         "folded", "tanh")
    assert kzlab.Lowering.preset("naive") is kzlab.NAIVE and kzlab.Lowering.preset("default") == kzlab.Lowering()
    with pytest.raises(InvalidOptionError, match="unknown lowering preset 'llama': default, device, naive, llamacpp"):
        kzlab.Lowering.preset("llama")


def test_the_llamacpp_graph_has_its_ops_and_stays_near_pytorch(ref):
    """The F16 im2col and the tanh GELU are llama.cpp's: PEERS measured its own graph near 55 dB from PyTorch; here
    every stage must stay above the F16 bound, 40 dB."""
    with kzlab.load("tiny", lowering=kzlab.LLAMACPP, backend="cpu", sched=False, threads=2) as d:
        low = stages_below(d, ref, 40.0)
        prof = kzlab.profile(d, frames=4, repeat=1, warmup=0, peak=False)
    assert not low, f"stages under 40 dB: {low}"
    ops = {n["op"] for n in prof.nodes}
    assert {"IM2COL", "COL2IM_1D", "SIN"} <= ops and "CUSTOM" not in ops
    assert any(o.startswith("GELU") and "ERF" not in o for o in ops), sorted(ops)
    im2col = [n for n in prof.nodes if n["op"] == "IM2COL"]
    assert im2col and all(n["type"] == "F16" for n in im2col)


def test_the_command_line_starts_from_a_preset_and_applies_the_changed_options(capsys):
    assert main(["simulate", "tiny", "--frames", "4", "--profile", "hexagon-v0.15.2", "--lowering", "llamacpp"]) == 0
    out = capsys.readouterr().out
    assert "portable: im2col-f16 src1=kernel col2im snake=folded" in out and "gelu=tanh" in out
    assert main(["simulate", "tiny", "--frames", "4", "--profile", "hexagon-v0.15.2", "--lowering", "llamacpp",
                 "--conv", "ktap"]) == 0
    assert "portable: ktap src1=kernel col2im" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["simulate", "tiny", "--lowering", "llama"])


def test_the_preset_runs_on_the_second_family_too():
    codes = np.arange(12, dtype=np.int32)[None] * 7 % 512
    with kzlab.load("wavtokenizer-tiny", lowering=kzlab.LLAMACPP, backend="cpu", sched=False, threads=2) as d:
        assert d.mode == "portable" and d.lowering.gelu == "tanh"
        assert np.all(np.isfinite(d.decode(codes)))


def test_a_cpu_profile_of_the_device_preset_prices_the_simulated_graph(tmp_path, capsys):
    """`conv` and `conv_src1` = auto are another graph on the CPU than on a device: a plain portable CPU profile is
    refused by a prediction, with what to run instead, and `--lowering device` is the graph the simulator places."""
    plain, device = tmp_path / "plain.json", tmp_path / "device.json"
    for out, extra in ((plain, ["--mode", "portable"]), (device, ["--lowering", "device"])):
        assert main(["profile", "tiny", "--frames", "4", "--backend", "cpu", "--no-sched", "--threads", "1",
                     "--repeat", "1", "--warmup", "0", "--no-peak", "-q", "--json", str(out), *extra]) == 0
    got = {p: json.loads(p.read_text())["config"]["lowering_resolved"] for p in (plain, device)}
    assert (got[plain]["conv"], got[plain]["conv_src1"]) == ("ktap-acc", "data")
    assert (got[device]["conv"], got[device]["conv_src1"]) == ("im2col-f32", "kernel")
    capsys.readouterr()
    sim = ["simulate", "tiny", "--frames", "4", "--profile", "hexagon-v0.15.2", "--predict", "--cpu-profile"]
    assert main([*sim, str(device)]) == 0
    assert "portable: im2col-f32 src1=kernel" in capsys.readouterr().out
    assert main([*sim, str(plain)]) != 0
    err = capsys.readouterr().err
    assert "conv='ktap-acc' (placement: 'im2col-f32')" in err and "--lowering device" in err
