"""Every toggle does what its label says: options are resolved once, up front, recorded as they ran, and a
combination that cannot run as asked is refused, never replaced.

The checks assert on what ran (the resolved backend set, the nodes' backends, the plan), not on the request.
"""

from __future__ import annotations

import json

import pytest
from conftest import TINY

from kzlab.cli import main
from kzlab.errors import InvalidOptionError
from kzlab.graph.options import MODES, NAIVE, Lowering, LoweringPlan
from kzlab.runtime.devices import available_backends
from kzlab.runtime.spec import BackendSpec

F32 = str(TINY / "qwentts-tokenizer-f32.gguf")
HAS_BLAS = "blas" in available_backends()
needs_blas = pytest.mark.skipif(not HAS_BLAS, reason="this ggml build has no BLAS backend (no OpenBLAS found)")


# ---- backends --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "available", "names", "sched"),
    [
        (BackendSpec("auto"), ["cpu", "blas"], ("blas", "cpu"), True),
        (BackendSpec("auto", sched=False), ["cpu", "blas"], ("cpu",), False),
        (BackendSpec("auto", sched=True), ["cpu", "blas"], ("blas", "cpu"), True),
        (BackendSpec("auto"), ["cpu"], ("cpu",), False),
        (BackendSpec("auto", sched=True), ["cpu"], ("cpu",), True),
        (BackendSpec("cpu"), ["cpu", "blas"], ("cpu",), False),
        (BackendSpec("cpu", sched=True), ["cpu", "blas"], ("cpu",), True),
        (BackendSpec("blas"), ["cpu", "blas"], ("blas", "cpu"), True),
        (BackendSpec(("BLAS", "CPU")), ["cpu", "blas"], ("blas", "cpu"), True),
        (BackendSpec("rpc://127.0.0.1:5"), ["cpu"], ("rpc://127.0.0.1:5",), False),
        (BackendSpec("rpc://127.0.0.1:5", sched=True), ["cpu"], ("rpc://127.0.0.1:5", "cpu"), True),
    ],
)
def test_backend_spec_resolves_to_what_runs(spec, available, names, sched):
    rb = spec.resolve(available)
    assert rb.names == names and rb.sched is sched
    assert rb.label == (f"sched[{'+'.join(names)}]" if sched else names[0])
    assert rb.requested is spec


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (BackendSpec("blas", sched=False), "sched=False cannot run it"),
        (BackendSpec(("blas", "cpu"), sched=False), "sched=False cannot run it"),
        (BackendSpec(("rpc://127.0.0.1:5", "cpu"), sched=False), "sched=False cannot run it"),
        (BackendSpec("tpu9"), "unknown backend"),
        (BackendSpec(("cpu", "cpu")), "twice"),
        (BackendSpec("cpu", weights_on="rpc"), "weights_on"),
        (BackendSpec("cpu", threads=0), "threads"),
        (BackendSpec("cpu", sched="yes"), "sched"),
    ],
)
def test_backend_spec_refuses_what_cannot_run_as_asked(spec, match):
    with pytest.raises(InvalidOptionError, match=match):
        spec.resolve(["cpu", "blas"])


def test_backend_keywords_or_a_spec_not_both():
    assert BackendSpec.from_kw(backend="cpu", sched=False) == BackendSpec("cpu", sched=False)
    with pytest.raises(InvalidOptionError, match="not both"):
        BackendSpec.from_kw(BackendSpec("cpu"), threads=2)


# ---- lowering ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cpu_only", [True, False])
@pytest.mark.parametrize(
    "low", [Lowering(), Lowering(conv="ktap"), Lowering(mm_chunk=64), NAIVE, Lowering(mode="portable")]
)
def test_a_plan_has_no_auto_and_a_mode(low, cpu_only):
    plan = low.resolve(cpu_only)
    assert isinstance(plan, LoweringPlan) and plan.requested is low
    assert "auto" not in plan.to_dict().values(), plan
    assert plan.mode in MODES
    fused = [n for n in ("snake", "resunit", "convt") if getattr(plan, n) == "fused"]
    assert plan.mode == ("fast" if fused else "portable")
    if not cpu_only:
        assert not fused
    assert plan.label().startswith(f"{plan.mode}:")


def test_modes(monkeypatch):
    from kzlab.graph import options

    monkeypatch.setattr(options, "_dwmlp_node_pays", lambda: True)  # a build where ggml's GELU_ERF is scalar
    p = Lowering(mode="portable").resolve(cpu_only=True)
    assert (p.snake, p.resunit, p.convt, p.mode) == ("folded", "ops", "col2im", "portable")
    f = Lowering(mode="fast").resolve(cpu_only=True)
    assert (f.snake, f.resunit, f.convt, f.dwmlp, f.mode) == ("fused", "fused", "fused", "fused", "fast")
    assert Lowering().resolve(cpu_only=True) == f
    assert Lowering().resolve(cpu_only=False) == Lowering(mode="portable").resolve(cpu_only=False)
    # fast asked, but every fused node turned off by the other options: the plan says what it is
    off = Lowering(mode="fast", snake="folded", conv="ktap", gelu="tanh").resolve(cpu_only=True)
    assert off.mode == "portable" and off.request_dict()["mode"] == "fast"
    with pytest.raises(InvalidOptionError, match="mode='portable'"):
        Lowering(mode="fast").resolve(cpu_only=False)
    for name in ("snake", "resunit", "convt"):
        with pytest.raises(InvalidOptionError, match=f"{name}='fused'"):
            Lowering(mode="portable", **{name: "fused"}).resolve(cpu_only=True)
        with pytest.raises(InvalidOptionError, match=f"{name}='fused'"):
            Lowering(**{name: "fused"}).resolve(cpu_only=False)
    assert Lowering(resunit="fused").portable().resolve(cpu_only=False).resunit == "ops"


def test_conv_auto_is_the_cpus_fastest_on_the_cpu_and_a_device_ports_elsewhere():
    from kzlab.graph.options import CONV_AUTO_CPU, CONV_AUTO_DEVICE, PRESETS

    def conv(low: Lowering, cpu_only: bool) -> tuple[str, str]:
        p = low.resolve(cpu_only)
        return p.conv, p.conv_src1

    assert CONV_AUTO_CPU != CONV_AUTO_DEVICE
    cpu, device = tuple(CONV_AUTO_CPU.values()), tuple(CONV_AUTO_DEVICE.values())
    for mode in ("auto", "portable"):
        assert conv(Lowering(mode=mode), True) == cpu
        assert conv(Lowering(mode=mode), False) == device
    assert conv(Lowering(mode="fast"), True) == cpu
    # each resolves on its own, and what is given is kept on any backend
    assert conv(Lowering(conv="im2col-f16"), True) == ("im2col-f16", CONV_AUTO_CPU["conv_src1"])
    assert conv(Lowering(conv_src1="kernel"), True) == (CONV_AUTO_CPU["conv"], "kernel")
    assert conv(Lowering(conv="ktap", conv_src1="data"), False) == ("ktap", "data")
    # a quantizing wtype keeps the convs' weights F32: the kernel as src1
    assert conv(Lowering(wtype="q8_0"), True) == (CONV_AUTO_CPU["conv"], "kernel")
    assert conv(Lowering(wtype="f16"), True) == cpu
    # the graph a device port runs is the same request on any backend, and the `device` preset is it
    for low in (Lowering(), Lowering(istft="graph"), Lowering(mode="fast", resunit="fused")):
        dev = low.portable()
        assert conv(dev, True) == conv(dev, False) == device
        assert dev.resolve(cpu_only=True) == dev.resolve(cpu_only=False)
    assert Lowering(istft="graph").portable().resolve(cpu_only=True) == Lowering(istft="graph").resolve(False)
    assert PRESETS["device"].resolve(cpu_only=True) == Lowering().resolve(cpu_only=False)
    # the request's label says auto; the plan's what auto became
    assert "auto src1=auto" in Lowering().label()
    assert "ktap-acc src1=data" in Lowering().resolve(cpu_only=True).label()


def test_the_graph_builder_takes_only_a_plan(tiny):
    from kzlab.graph.builder import GraphBuilder, WeightTensors
    from kzlab.graph.prepared import prepare_weights

    plan = Lowering().resolve(cpu_only=True)
    wt = WeightTensors(prepare_weights(tiny, plan))
    try:
        with pytest.raises(TypeError, match="LoweringPlan"):
            GraphBuilder(wt, Lowering())
    finally:
        wt.free()


# ---- what the API, the CLI and the widgets record ----------------------------------------------------------------
def test_decoder_says_what_runs():
    import kzlab

    with kzlab.load(F32, backend="auto", sched=False, threads=1) as d:
        assert d.resolved_backends.sched is False and d.backend_label == "cpu"
        assert d.mode == "fast" and d.lowering.requested == Lowering()
    with kzlab.load(F32, backend="cpu", threads=1, mode="portable") as d:
        assert d.mode == "portable" and "fused" not in d.lowering.to_dict().values()
        assert "portable:" in repr(d)


def _profile_cli(tmp_path, *extra: str) -> tuple[int, dict | None]:
    out = tmp_path / "p.json"
    argv = ["profile", F32, "--frames", "4", "--repeat", "1", "--warmup", "0", "--no-peak", "--threads", "1"]
    rc = main([*argv, *extra, "--json", str(out)])
    return rc, (json.loads(out.read_text()) if rc == 0 else None)


@needs_blas
def test_profile_no_sched_runs_without_the_scheduler(tmp_path):
    rc, p = _profile_cli(tmp_path, "--backend", "auto", "--no-sched", "--convt", "col2im")
    assert rc == 0
    c = p["config"]
    assert c["sched"] is False and c["backend"] == ["cpu"] and c["backend_label"] == "cpu"
    assert c["sched_requested"] is False and c["backend_requested"] == "auto"
    assert {n["backend"] for n in p["nodes"]} == {"cpu"}
    assert c["mode"] in MODES and "auto" not in c["lowering_resolved"].values()
    assert c["lowering_requested"]["convt"] == "col2im" and c["lowering_requested"]["mode"] == "auto"
    # the same request with the scheduler: BLAS takes the products it accepts
    rc, p = _profile_cli(tmp_path, "--backend", "auto", "--sched", "--convt", "col2im")
    assert rc == 0 and p["config"]["sched"] is True and p["config"]["backend"] == ["blas", "cpu"]
    assert "blas" in {n["backend"] for n in p["nodes"]}


@needs_blas
def test_blas_without_the_scheduler_is_refused(tmp_path, capsys):
    rc, _ = _profile_cli(tmp_path, "--backend", "blas", "--no-sched")
    assert rc == 2
    assert "sched=False cannot run it" in capsys.readouterr().err


def test_profile_json_records_the_portable_mode(tmp_path):
    rc, p = _profile_cli(tmp_path, "--backend", "cpu", "--mode", "portable")
    assert rc == 0
    c = p["config"]
    assert c["mode"] == "portable" and c["lowering_resolved"]["mode"] == "portable"
    assert "auto" not in c["lowering_resolved"].values()
    assert "CUSTOM" not in {n["op"] for n in p["nodes"]}  # ggml ops only


def test_placement_json_records_the_resolved_lowering(tmp_path, capsys):
    out = tmp_path / "pl.json"
    rc = main(["simulate", F32, "--profile", "hexagon-v0.15.2", "--frames", "4", "--json", str(out)])
    assert rc == 0
    c = json.loads(out.read_text())["config"]
    assert c["mode"] == "portable" and "auto" not in c["lowering_resolved"].values()
    assert c["lowering_requested"]["snake"] == "auto"
    assert "portable mode" in capsys.readouterr().out
    assert main(["simulate", F32, "--frames", "4", "--mode", "fast"]) == 2
    assert "mode='portable'" in capsys.readouterr().err


def test_workbench_unchecked_box_runs_without_the_scheduler():
    import kzlab

    w = kzlab.Workbench(folder=TINY)
    assert w.sched.value is HAS_BLAS  # checked where backend auto needs the scheduler (BLAS built)
    w.model_path.value = F32
    w.frames.value, w.repeat.value, w.threads.value = 2, 1, 1
    w.backend.value = "auto"
    w.sched.value = False
    w.lowering["mode"].value = "portable"
    w.run_button.click()
    assert w.wait(300) and w.error is None, w.error
    rec = w.results[-1]
    assert rec.backends_resolved["sched"] is False and rec.backend_label == "cpu" and rec.mode == "portable"
    assert rec.profile.config["sched"] is False and {n["backend"] for n in rec.profile.nodes} == {"cpu"}
    assert "cpu" in rec.label and "portable" in rec.label
    caption = w.views["Ops"].html[0]
    assert "scheduler: off" in caption and "mode: portable" in caption
    assert rec.config()["sched"] is False and rec.config()["sched_requested"] is False
