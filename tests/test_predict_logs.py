"""Device measurements and device logs: `test-backend-ops perf` output (console, csv, sql) and the real scheduler's
GGML_SCHED_DEBUG=2 log compared with the placement simulation; capability profiles read from a path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DATA, TINY

from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.simulate import simulate
from kzlab.analysis.predict import oplog, schedlog
from kzlab.errors import InvalidInputError, InvalidOptionError
from kzlab.graph.options import Lowering

LOGS = DATA / "logs"
CONSOLE = LOGS / "test-backend-ops-perf.console.txt"
CSV = LOGS / "test-backend-ops-perf.csv"
SQL = LOGS / "test-backend-ops-perf.sql"
SCHED = LOGS / "sched-debug2-blas-cpu.log"
TINY_F32 = TINY / "qwentts-tokenizer-f32.gguf"
LOW = Lowering(mode="portable", conv="im2col-f32", conv_src1="data", convt="col2im", attn="mulmat")
MM = "type_a=f16,type_b=f32,m=1024,n={n},k=1024,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1"


def line_of(path: Path, needle: str) -> int:
    return next(i for i, x in enumerate(path.read_text().splitlines(), 1) if needle in x)


# ---- test-backend-ops: the three formats ------------------------------------------------------------------------
def test_console_format():
    rs = oplog.read(CONSOLE)
    assert [r.op for r in rs] == ["MUL_MAT"] * 5 + ["IM2COL", "ADD", "SIN"]
    assert {r.backend for r in rs} == {"CPU"} and all(r.fmt == "console" and r.supported for r in rs)
    mm = rs[0]
    # `  MUL_MAT(type_a=f16,...,n=8,...):  <pad>  49131 runs -    20.50 us/run -  16.78 MFLOP/run - 818.40 GFLOPS`
    assert mm.line == line_of(CONSOLE, MM.format(n=8))
    assert mm.vars == MM.format(n=8)
    assert mm.params == {
        "type_a": "f16",
        "type_b": "f32",
        "m": 1024,
        "n": 8,
        "k": 1024,
        "bs": (1, 1),
        "nr": (1, 1),
        "per": (0, 1, 2, 3),
        "k_v": 0,
        "o": 1,
    }
    assert mm.types == {"type_a": "f16", "type_b": "f32"} and mm.dims["m"] == 1024
    assert (mm.n_runs, mm.time_us) == (49131, 20.5)
    assert mm.flop_per_run == pytest.approx(16.78e6) and mm.flops == pytest.approx(818.40e9)
    assert mm.bandwidth_gb_s is None and mm.memory_kb is None
    assert rs[3].flop_per_run == pytest.approx(1.07e9) and rs[3].flops == pytest.approx(1.51e12)
    im = rs[5]  # `... 1206 runs -  1510.40 us/run -     6960 kB/run -    4.39 GB/s`
    assert im.params["ne_input"] == (3000, 128, 1, 1) and im.params["is_2D"] == 0
    assert im.types == {"type_input": "f32", "type_kernel": "f16", "dst_type": "f32"}
    assert (im.n_runs, im.time_us, im.memory_kb, im.bandwidth_gb_s, im.flops) == (1206, 1510.4, 6960, 4.39, None)
    add, sin = rs[6], rs[7]
    assert add.params == {"type": "f32", "ne": (1024, 128, 1, 1), "nr": (1, 1, 1, 1), "nf": 1, "perm1": 0}
    assert (add.time_us, add.memory_kb, add.bandwidth_gb_s) == (35.2, 1536, 41.61)
    assert (sin.time_us, sin.n_runs, sin.memory_kb) == (120.6, 16384, 1024)


def test_sql_format():
    rs = oplog.read(SQL)
    assert len(rs) == 12 and all(r.fmt == "sql" and r.mode == "perf" for r in rs)
    blas = [r for r in rs if r.backend == "BLAS"]
    assert [(r.op, r.supported) for r in blas] == [("MUL_MAT", True), ("MUL_MAT", True), ("ADD", False), ("SIN", False)]
    add = blas[2]  # ... 'perf', '0', '0', 'not supported', '0.000000', ...
    assert add.time_us is None and add.n_runs is None and add.extra["error_message"] == "not supported"
    cpu = [r for r in rs if r.backend == "CPU"]
    mm = cpu[0]
    assert mm.line == line_of(SQL, "'CPU', 'MUL_MAT', '" + MM.format(n=8))
    assert (mm.time_us, mm.n_runs, mm.memory_kb) == (20.5, 49131, 2112)
    assert mm.flops == pytest.approx(818400780487.804878) and mm.bandwidth_gb_s is None
    assert mm.flop_per_run == pytest.approx(2 * 1024 * 8 * 1024)
    assert mm.extra["test_time"] == "2026-03-02T10:16:02Z" and mm.extra["build_commit"] == "unknown"
    sin = cpu[-1]
    assert sin.op == "SIN" and sin.flops is None and sin.bandwidth_gb_s == pytest.approx(8.097533)
    # the console and sql fixtures describe the same CPU run
    con = oplog.read(CONSOLE)
    assert [(r.op, r.vars, r.time_us, r.n_runs) for r in cpu] == [(r.op, r.vars, r.time_us, r.n_runs) for r in con]


def test_csv_format():
    rs = oplog.read(CSV)
    con = oplog.read(CONSOLE)
    assert [(r.backend, r.op, r.vars) for r in rs] == [(r.backend, r.op, r.vars) for r in con]
    assert rs[0].line == 2 and rs[0].params["n"] == 8 and rs[0].supported and rs[0].mode == "perf"
    # csv_printer::get_fields_csv has no time, runs or flops column: nothing to estimate from
    assert all(r.time_us is None and r.n_runs is None and r.flops is None for r in rs)
    assert oplog.match_mul_mat(rs, "f16", "f32", 1024, 8, 1024) is None


def test_csv_with_more_columns(tmp_path):
    """A csv with more test_result fields (llama.cpp PR #22844) is read with them."""
    p = tmp_path / "wide.csv"
    p.write_text(
        '"backend_name","op_name","op_params","test_mode","supported","time_us","flops","n_runs"\n'
        '"CPU","MUL_MAT","' + MM.format(n=8) + '","perf","1","20.500000","818400780487.804878","49131"\n'
    )
    (r,) = oplog.read(p)
    assert (r.time_us, r.n_runs) == (20.5, 49131) and r.flops == pytest.approx(8.184e11)


def test_not_supported_console_line(tmp_path):
    p = tmp_path / "blas.txt"
    p.write_text(
        "Testing 2 devices\n\nBackend 1/2: BLAS\n  Device description: x\n\n"
        "  ADD(type=f32,ne=[1024,128,1,1],nr=[1,1,1,1],nf=1,perm1=0): not supported\n"
        "  Backend BLAS: OK\nBackend 2/2: CPU\n  Skipping CPU backend\n2/2 backends passed\nOK\n"
    )
    (r,) = oplog.read(p)
    assert (r.backend, r.op, r.supported, r.time_us) == ("BLAS", "ADD", False, None)


# ---- a node's time from the measured rows ---------------------------------------------------------------------------
@pytest.mark.parametrize("fixture", [CONSOLE, SQL])
def test_match_exact_interpolated_extrapolated(fixture):
    rs = oplog.read(fixture)

    def mm(n, **kw):
        return oplog.match_mul_mat(rs, "f16", "f32", 1024, n, 1024, backend="CPU", **kw)

    e = mm(32)
    assert (e.how, e.time_us, e.used) == ("exact", 55.25, [(32, 55.25)]) and e.records[0].params["n"] == 32
    e = mm(64)
    assert e.how == "interpolated" and e.used == [(32, 55.25), (128, 190.0)]
    assert e.time_us == pytest.approx(55.25 + (190.0 - 55.25) * (64 - 32) / (128 - 32))
    e = mm(1024)
    assert (e.how, e.time_us, e.used) == ("extrapolated", 712.75 * 2, [(512, 712.75)])
    e = mm(4)
    assert (e.how, e.time_us) == ("extrapolated", 20.5 / 2)
    assert "interpolated" in mm(64).describe()
    # the key holds the types and every other param: f32 x f32 is another curve, a batched one is absent
    f32 = oplog.match_mul_mat(rs, "f32", "f32", 1024, 64, 1024, backend="CPU")
    assert (f32.how, f32.time_us) == ("extrapolated", 160.0)
    assert mm(64, bs=(2, 1)) is None
    assert oplog.match_mul_mat(rs, "f16", "f32", 1024, 64, 2048, backend="CPU") is None
    # generic form: the same lookup through `match`, values as printed or as Python values
    params = dict(type_a="f16", type_b="f32", m=1024, n=64, k=1024, bs="[1,1]", nr=[1, 1], per=(0, 1, 2, 3), k_v=0, o=1)
    assert oplog.match(rs, "MUL_MAT", params, backend="cpu").time_us == pytest.approx(mm(64).time_us)


def test_match_needs_the_backend_when_several():
    rs = oplog.read(SQL)
    with pytest.raises(InvalidOptionError, match="BLAS, CPU"):
        oplog.match_mul_mat(rs, "f16", "f32", 1024, 256, 1024)
    e = oplog.match_mul_mat(rs, "f16", "f32", 1024, 256, 1024, backend="blas")
    assert e.backend == "BLAS" and e.how == "interpolated"
    assert e.time_us == pytest.approx(150.0 + (480.5 - 150.0) * (256 - 128) / (512 - 128))
    with pytest.raises(InvalidOptionError, match="row-count"):
        oplog.match(rs, "MUL_MAT", {"type_a": "f16"})


# ---- test-backend-ops: refusals --------------------------------------------------------------------------------------
def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_truncated_outputs_are_refused(tmp_path):
    con = CONSOLE.read_text()
    cut = con[: con.index("55.25 us/run")]  # in the middle of a result line: no end of line
    with pytest.raises(InvalidInputError, match=r"cut\.txt, line 10: .*cut off"):
        oplog.read(_write(tmp_path, "cut.txt", cut))
    cut = con[: con.index("  Backend CPU:")]  # at a line end, before the section's status line
    with pytest.raises(InvalidInputError, match=r"cut2\.txt, line \d+: .*CPU.*cut off"):
        oplog.read(_write(tmp_path, "cut2.txt", cut))
    lines = con.splitlines(keepends=True)
    lines[9] = lines[9][: lines[9].index(" - ", lines[9].index("us/run")) + 3] + "\n"  # the rate dropped
    with pytest.raises(InvalidInputError, match=r"cut3\.txt, line 10: perf result cut off"):
        oplog.read(_write(tmp_path, "cut3.txt", "".join(lines)))
    lines = con.splitlines(keepends=True)
    lines[9] = "  MUL_MAT(type_a=f16,type_b=f32,m=1024,n=32,k=1024,bs=[1,1\n"
    with pytest.raises(InvalidInputError, match=r"cut4\.txt, line 10"):
        oplog.read(_write(tmp_path, "cut4.txt", "".join(lines)))
    sql = SQL.read_text()
    with pytest.raises(InvalidInputError, match=r"cut\.sql, line 22: INSERT cut off"):
        oplog.read(_write(tmp_path, "cut.sql", sql[: sql.index("'ADD'")] + "\n"))
    with pytest.raises(InvalidInputError, match=r"cut2\.sql, line 21: .*cut off"):
        oplog.read(_write(tmp_path, "cut2.sql", sql[: sql.index("'480.500000'")]))
    csv = CSV.read_text()
    with pytest.raises(InvalidInputError, match=r"cut\.csv, line 5: .*cut off"):
        oplog.read(_write(tmp_path, "cut.csv", csv[: csv.index("n=512")] + "\n"))


def test_foreign_files_are_refused(tmp_path):
    for name, text in [
        ("empty.txt", ""),
        ("notes.txt", "hello\nworld\n"),
        ("data.json", '{"op": "MUL_MAT", "time_us": 3}\n'),
        ("other.csv", '"a","b"\n"1","2"\n'),
    ]:
        with pytest.raises(InvalidInputError, match=f"{name}: not test-backend-ops output"):
            oplog.read(_write(tmp_path, name, text))
    with pytest.raises(InvalidInputError, match="sched-debug2-blas-cpu.log: not test-backend-ops output"):
        oplog.read(SCHED)
    with pytest.raises(InvalidInputError, match=r"foreign\.csv, line 1: columns \['time'\] are not test_result"):
        oplog.read(_write(tmp_path, "foreign.csv", '"op_name","op_params","time"\n"ADD","type=f32","3"\n'))
    test_mode = (
        "Testing 1 devices\n\nBackend 1/1: CPU\n\n  ADD(type=f32,ne=[10,10,1,1],nr=[1,2,1,1],nf=1,perm1=0): OK\n"
    )
    with pytest.raises(InvalidInputError, match=r"test\.txt, line 5: a test/support-mode result"):
        oplog.read(_write(tmp_path, "test.txt", test_mode))
    with pytest.raises(InvalidInputError, match=r"bin\.txt: not text"):
        p = tmp_path / "bin.txt"
        p.write_bytes(b"\xff\xfe\x00GGUF")
        oplog.read(p)
    with pytest.raises(InvalidInputError, match="not test-backend-ops sql output.*looks like console"):
        oplog.read(CONSOLE, fmt="sql")


# ---- the real scheduler's log ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model():
    from kzlab.loader import load_model

    return load_model(TINY_F32)


@pytest.fixture(scope="module")
def blas_placement(tiny_model):
    # as tests/test_placement.py::test_what_if_path_matches_real_blas: BLAS and the CPU share one buffer type
    return simulate(
        tiny_model, frames=3, lowering=LOW, backends=[("BLAS", "blas", "CPU"), ("CPU", "cpu", "CPU")], weights_on="BLAS"
    )


def test_sched_log_format():
    log = schedlog.read(SCHED)
    assert len(log.passes) == 1
    p = log.passes[0]
    assert p.level == 2 and p.n_splits == 15 and len(p.nodes) == 404
    assert [s.backend for s in p.splits[:3]] == ["CPU", "BLAS", "CPU"] and all(not s.inputs for s in p.splits)
    assert p.by_backend() == {"CPU": 397, "BLAS": 7}
    n = p.nodes[0]
    # node #  1 (  GET_ROWS):    vq.first:GET_ROWS (   0K) [  CPU         ] use=1,c=1:    vq.first.codebook (...
    assert (n.index, n.op, n.name, n.size, n.backend, n.cause, n.use, n.compute) == (
        1, "GET_ROWS", "vq.first:GET_ROWS", "0K", "CPU", "", 1, True
    )  # fmt: skip
    assert [(s.name, s.backend) for s in n.sources] == [("vq.first.codebook", "BLAS"), ("codes (view)", "CPU")]
    assert n.line == 3 and n.split == 0
    blas = next(x for x in p.nodes if x.backend == "BLAS")
    assert blas.op == "MUL_MAT" and blas.name == "dec.1.res.0.conv1:MU" and blas.split == 1  # names cut at 20
    assert blas.sources[1].name == "(reshaped) (view)"
    assert p.assignment()[0] == (1, "vq.first:GET_ROWS", "CPU")


def test_real_log_matches_the_simulation(tiny_model, blas_placement):
    # the checked-in log, and one captured now in-process: a change of ggml's print format shows in both
    captured = schedlog.capture(tiny_model, LOW, ["blas", "cpu"], 3, level=2)
    for log in (schedlog.read(SCHED), schedlog.parse(captured, "captured")):
        d = schedlog.diff_placement(log, blas_placement)
        assert d.ok, d.summary()
        assert d.n_compared == 404 and d.n_splits_sim == d.n_splits_real == 15
        assert "no disagreement on 404 nodes" in d.summary()
    assert captured == SCHED.read_text()


def test_edited_log_shows_the_node(tmp_path, blas_placement):
    lines = SCHED.read_text().splitlines(keepends=True)
    i = next(k for k, x in enumerate(lines) if x.startswith("node #  2 "))
    assert "[  CPU         ] use=" in lines[i]
    lines[i] = lines[i].replace("[  CPU         ] use=", "[ BLAS         ] use=", 1)
    d = schedlog.diff_placement(schedlog.read(_write(tmp_path, "edited.log", "".join(lines))), blas_placement)
    assert not d.ok
    (x,) = d.disagreements
    assert (x.index, x.name, x.op, x.simulated, x.real) == (2, blas_placement.nodes[2].name, "MUL_MAT", "CPU", "BLAS")
    assert "1 of 404 nodes disagree" in d.summary() and f"#2     {x.name} (MUL_MAT): CPU -> BLAS" in d.summary()


def test_sched_log_refusals(tmp_path, blas_placement):
    text = SCHED.read_text()
    lines = text.splitlines(keepends=True)
    with pytest.raises(InvalidInputError, match=r"cut\.log, line 30: .*cut off"):
        schedlog.read(_write(tmp_path, "cut.log", "".join(lines[:29]) + lines[29][:70]))
    with pytest.raises(InvalidInputError, match=r"cut2\.log, line 30: node line"):
        schedlog.read(_write(tmp_path, "cut2.log", "".join(lines[:29]) + lines[29][:70] + "\n"))
    k = next(i for i, x in enumerate(lines) if x.startswith("## SPLIT #3:"))
    with pytest.raises(InvalidInputError, match=r"gap\.log, line \d+: split #4 follows split #2"):
        schedlog.read(_write(tmp_path, "gap.log", "".join(lines[:k] + lines[k + 1 :])))
    bad = lines[:k] + [lines[k].replace("# 0 inputs", "# 2 inputs")] + lines[k + 1 :]
    with pytest.raises(InvalidInputError, match=r"count\.log, line \d+: split #3 says 2 inputs but 0"):
        schedlog.read(_write(tmp_path, "count.log", "".join(bad)))
    last = max(i for i, x in enumerate(lines) if x.startswith("## SPLIT"))
    with pytest.raises(InvalidInputError, match=r"tail\.log, line \d+: split #14 has no node lines"):
        schedlog.read(_write(tmp_path, "tail.log", "".join(lines[: last + 1])))
    with pytest.raises(InvalidInputError, match=r"middle\.log, line 1: a node line before any"):
        schedlog.read(_write(tmp_path, "middle.log", "".join(lines[2:])))
    with pytest.raises(InvalidInputError, match=r"test-backend-ops-perf\.sql: not a GGML_SCHED_DEBUG log"):
        schedlog.read(SQL)
    # level 1: splits only; the node comparison needs level 2
    lvl1 = schedlog.read(_write(tmp_path, "l1.log", "".join(x for x in lines if not x.startswith("node #"))))
    assert lvl1.passes[0].level == 1 and lvl1.passes[0].n_splits == 15
    with pytest.raises(InvalidInputError, match="GGML_SCHED_DEBUG=2"):
        schedlog.diff_placement(lvl1, blas_placement)
    # two passes (a reserve, then an alloc): the last is compared unless told
    two = schedlog.read(_write(tmp_path, "two.log", "noise from another logger\n" + text + text))
    assert len(two.passes) == 2 and schedlog.diff_placement(two, blas_placement, 0).ok
    assert "compared pass 1" in schedlog.diff_placement(two, blas_placement).summary()


def printf(fmt: str, *args) -> str:
    """C's printf for %d / %s with width and precision (what ggml's log lines are made of)."""
    return fmt % args


def test_split_inputs_and_backend_names():
    # written with ggml_backend_sched_print_assignments' format strings (the older node line: no use=,c=)
    split = printf("\n## SPLIT #%d: %s # %d inputs", 0, "RPC0[127.0.0.1:50052]", 2) + ": "
    split += printf("[%s (%5.5s)] ", "codes (view)", "0K") + printf("[%s (%5.5s)] ", "x (cont)", "12M") + "\n"
    node = printf(
        "node #%3d (%10.10s): %20.20s (%5.5s) [%5.5s %8.8s]:",
        3, "CONV_TRANSPOSE_1D", "x:CONV_TRANSPOSE_1D", "125K", "RPC0[127.0.0.1:50052]", "",
    )  # fmt: skip
    node += printf(" %20.20s (%5.5s) [%5.5s %8.8s]", "x", "12M", "RPC0[127.0.0.1:50052]", "")
    node += printf(" %20.20s (%5.5s) [%5.5s %8.8s]", "w.weight with a long name", "3K", "NULL", "") + "\n"
    text = split + node
    log = schedlog.parse(text, "rpc.log")
    (sp,) = log.splits
    assert sp.backend == "RPC0[127.0.0.1:50052]"
    assert [(i.name, i.size, i.bytes_at_least) for i in sp.inputs] == [
        ("codes (view)", "0K", 0),
        ("x (cont)", "12M", 12 * 1024 * 1024),
    ]
    (n,) = log.nodes
    assert (n.op, n.name, n.printed_backend, n.backend, n.use) == (
        "CONV_TRANS", "x:CONV_TRANSPOSE_1D", "RPC0[", "RPC0[127.0.0.1:50052]", None
    )  # fmt: skip
    assert [(s.name, s.backend) for s in n.sources] == [("x", "RPC0["), ("w.weight with a long", "NULL")]
    fam = schedlog.family
    assert [fam(x) for x in ("RPC0[127.0.0.1:50052]", "RPC", "HTP0", "HTP", "blas", "CUDA0", "Vulka", "MTL0")] == [
        "RPC", "RPC", "HTP", "HTP", "BLAS", "CUDA", "VULKAN", "METAL"
    ]  # fmt: skip


def test_real_rpc_log_matches_the_simulation(tiny_model):
    """Over RPC every stage input is copied: the split inputs are compared too."""
    from kzlab.runtime.rpc import rpc_server

    with rpc_server(threads=1) as srv:
        text = schedlog.capture(tiny_model, LOW, [srv.address, "cpu"], 3)
    log = schedlog.parse(text, "rpc")
    assert log.splits[0].backend.startswith("RPC") and len(log.splits[0].inputs) > 1
    pl = simulate(tiny_model, "rpc", frames=3, lowering=LOW, weights_on="rpc")
    d = schedlog.diff_placement(log, pl)
    assert d.ok, d.summary()
    assert [x.name for x in log.splits[0].inputs] == pl.splits[0].inputs


# ---- capability profiles from a path ---------------------------------------------------------------------------------
def _profile(tmp_path, edit=None, name="my-blas.toml") -> Path:
    text = (capabilities.DIR / "blas.toml").read_text().replace('name = "blas"', 'name = "my-blas"')
    if edit:
        text = edit(text)
    return _write(tmp_path, name, text)


def test_profile_from_a_path(tmp_path):
    p = _profile(tmp_path)
    c = capabilities.load(p)
    assert (c.name, c.backend, c.accepts) == ("my-blas", "BLAS", ["host"])
    assert capabilities.load(str(p)).ops == capabilities.load("blas").ops
    nameless = _profile(tmp_path, lambda t: t.replace('name = "my-blas"\n', ""), name="other.toml")
    assert capabilities.load(nameless).name == "other"


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda t: "speed = 3\n" + t, r"unknown key 'speed'"),
        (
            lambda t: t.replace('["blas_mul_mat", 32]', '["blas_mul_matt", 32]'),
            r"ops\.MUL_MAT: unknown rule 'blas_mul_matt'",
        ),
        (lambda t: t.replace('accepts = ["host"]', 'accepts = "host"'), r"accepts must be a list"),
        (lambda t: t.replace("offload_op = false", 'offload_op = "no"'), r"offload_op must be true/false"),
        (lambda t: t.replace("host = true", "host = true, size = 3"), r"unknown key 'buffer\.size'"),
        (lambda t: t.replace("OUT_PROD =", "OUT_PRODUCT ="), r"ops\.OUT_PRODUCT: not an op name"),
        (lambda t: t.replace('backend = "BLAS"\n', ""), r"missing key 'backend'"),
        (lambda t: t.replace('default = "refuse"', 'default = "maybe"'), r"default must be"),
        (lambda t: t + "[[[", r"not valid TOML"),
    ],
)
def test_bad_profiles_are_refused(tmp_path, edit, message):
    p = _profile(tmp_path, edit)
    with pytest.raises(InvalidOptionError, match=f"capability profile {p}: {message}"):
        capabilities.load(p)


def test_unknown_profiles_are_refused(tmp_path):
    with pytest.raises(InvalidOptionError, match="or a path to a .toml file"):
        capabilities.load("hexagon-v9")
    with pytest.raises(InvalidOptionError, match="no such file"):
        capabilities.load(tmp_path / "none.toml")


# ---- the command line ------------------------------------------------------------------------------------------------
SIM_ARGS = ["--frames", "3", "--mode", "portable", "--conv", "im2col-f32", "--conv-src1", "data", "--convt", "col2im"]


def test_cli_simulate_with_profile_path_and_sched_log(tmp_path, capsys):
    from kzlab.cli import main

    prof = _profile(tmp_path)  # BLAS's profile under another name: weights on its (host) buffer, as in the log
    rc = main(["simulate", str(TINY_F32), "--profile", str(prof), *SIM_ARGS, "--sched-log", str(SCHED)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "profile my-blas (BLAS > CPU)" in out
    assert f"real scheduler log {SCHED}:\nno disagreement on 404 nodes\nsplits: simulated 15, real 15 (same)" in out

    node2 = "node #  2 (   MUL_MAT): vq.first.output_proj (   0K) ["
    edited = SCHED.read_text().replace(node2 + "  CPU ", node2 + " BLAS ")
    log = _write(tmp_path, "edited.log", edited)
    assert main(["simulate", str(TINY_F32), "--profile", str(prof), *SIM_ARGS, "--sched-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "1 of 404 nodes disagree" in out and ": CPU -> BLAS" in out

    bad = _profile(tmp_path, lambda t: "speed = 3\n" + t, name="bad.toml")
    assert main(["simulate", str(TINY_F32), "--profile", str(bad), *SIM_ARGS]) == 2
    assert f"capability profile {bad}: unknown key 'speed'" in capsys.readouterr().err
    assert main(["simulate", str(TINY_F32), "--profile", str(prof), *SIM_ARGS, "--sched-log", str(CONSOLE)]) == 2
    assert "not a GGML_SCHED_DEBUG log" in capsys.readouterr().err


def test_fixture_readme_names_the_source():
    text = (LOGS / "README.md").read_text()
    assert "not measurements" in text and "tests/test-backend-ops.cpp" in text and "print_perf_console" in text


def test_match_row_count_in_an_array():
    """ADD and SIN keep their rows in ne[1]: `row_param="ne[1]"`; the other elements stay in the key."""
    rs = oplog.read(SQL)
    add = dict(type="f32", ne=[1024, 256, 1, 1], nr=[1, 1, 1, 1], nf=1, perm1=0)
    e = oplog.match(rs, "ADD", add, row_param="ne[1]", backend="CPU")
    assert (e.how, e.rows, e.used, e.time_us) == ("extrapolated", 256, [(128, 35.2)], pytest.approx(70.4))
    sin = oplog.match(rs, "SIN", dict(type="f32", ne=(1024, 128, 1, 1)), row_param="ne[1]", backend="cpu")
    assert (sin.how, sin.time_us) == ("exact", 120.6)
    assert oplog.match(rs, "SIN", dict(type="f32", ne=(512, 128, 1, 1)), row_param="ne[1]", backend="CPU") is None
    # the unsupported BLAS rows are no measurement; a backend is matched by name, else by its family
    assert oplog.match(rs, "ADD", add, row_param="ne[1]", backend="BLAS") is None
    assert oplog.match_mul_mat(rs, "f16", "f32", 1024, 128, 1024, backend="blas0").time_us == 150.0


# ---- ggml-hexagon's own per-op profile (GGML_HEXAGON_PROFILE=1) -------------------------------------------------
HEX_PIPE = LOGS / "hexagon-profile-78c531d.log"
HEX_COLON = LOGS / "hexagon-profile-v0.15.2.log"


def test_hexagon_profile_pipe_format():
    rs = oplog.read(HEX_PIPE)
    assert oplog.detect(HEX_PIPE.read_text()) == "hexagon"
    assert [r.op for r in rs] == ["MUL_MAT"] * 3 + ["ADD", "RMS_NORM+MUL", "CPY"]  # OPBATCH and other lines skipped
    assert all(r.fmt == "hexagon" and r.backend == "HTP0" and r.n_runs == 1 and r.supported for r in rs)
    mm = rs[0]
    assert mm.line == line_of(HEX_PIPE, "mm.0|")
    assert mm.params == {
        "type_a": "f16",
        "type_b": "f32",
        "m": 1024,
        "n": 32,
        "k": 1024,
        "bs": (1, 1),
        "nr": (1, 1),
        "per": (0, 1, 2, 3),
        "k_v": 0,
        "o": 1,
    }
    assert mm.vars == MM.format(n=32)  # the same key test-backend-ops prints for this product
    assert mm.time_us == 310 and mm.flop_per_run == 2 * 1024 * 1024 * 32
    assert mm.flops == pytest.approx(2 * 1024 * 1024 * 32 / 310e-6)
    assert mm.extra["kparams"] == "hvx-tiled vtcm 524288" and mm.extra["cycles"] == "341000"
    assert mm.extra["mhz"] == "1100.0" and mm.extra["pmu"] == ""
    assert rs[3].params == {"type": "f32", "ne": (1024, 128, 1, 1)} and rs[3].flop_per_run is None
    assert rs[5].params == {"type": "f32", "ne": (128, 1024, 1, 1), "contiguous": 0}  # a transposed source


def test_hexagon_profile_colon_format_with_pmu():
    rs = oplog.read(HEX_COLON)
    assert [(r.op, r.time_us) for r in rs] == [("MUL_MAT", 300), ("GELU", 64)]
    assert rs[0].params["n"] == 32 and rs[0].extra["pmu"] == "330000,1200,800,0,52000,11,3,7"
    assert rs[0].extra["style"] == "colon" and rs[0].extra["kparams"] == ""
    assert rs[1].params == {"type": "f32", "ne": (1024, 128, 2, 1)}


def test_hexagon_profile_rows_match_nodes():
    rs = oplog.read(HEX_PIPE)
    exact = oplog.match_mul_mat(rs, "f16", "f32", 1024, 128, 1024, backend="HTP0")
    assert exact.how == "exact" and exact.time_us == pytest.approx(1060)  # two runs of n=128 averaged
    mid = oplog.match_mul_mat(rs, "f16", "f32", 1024, 80, 1024)
    assert mid.how == "interpolated" and mid.time_us == pytest.approx(310 + (1060 - 310) * 48 / 96)
    add = oplog.match(rs, "ADD", {"type": "f32", "ne": (1024, 64, 1, 1)}, row_param="ne[1]")
    assert add.how == "extrapolated" and add.time_us == pytest.approx(21)
    assert oplog.match(rs, "CPY", {"type": "f32", "ne": (128, 1024, 1, 1)}, row_param="ne[1]") is None
    assert oplog.match_mul_mat(rs, "f16", "f32", 1024, 128, 1024, backend="CPU") is None


def test_hexagon_profile_refusals(tmp_path):
    good = HEX_PIPE.read_text().splitlines(keepends=True)
    n = line_of(HEX_PIPE, "mm.0|")

    def edited(fname: str, line: str) -> Path:
        p = tmp_path / fname
        p.write_text("".join(good[: n - 1] + [line] + good[n:]))
        return p

    cases = {
        "cut.log": ("ggml-hex: HTP0 profile-op MUL_MAT|w.0 x x.0 -> mm.0|1024:1024 x 1024:32\n", "cut off"),
        "tail.log": (good[n - 1].replace(" mhz 1100.0", " mhz"), "is not 'usec U cycles C start S mhz F'"),
        "dims.log": (good[n - 1].replace("1024:1024 x", "1024:x x"), "is not one tensor's dims"),
        "count.log": (good[n - 1].replace("f16 x f32 -> f32", "f16 -> f32"), "list 3, 2, 3 tensors"),
        "opname.log": (good[n - 1].replace("profile-op MUL_MAT|", "profile-op mul mat|"), "not a ggml op"),
        "pmu.log": (good[n - 1].rstrip("\n") + " pmu [1,2,3]\n", "is not 'usec U cycles"),
    }
    for fname, (line, message) in cases.items():
        with pytest.raises(InvalidInputError, match=rf"{fname}, line {n}: .*{message}"):
            oplog.read(edited(fname, line))
    only_batches = tmp_path / "batches.log"
    only_batches.write_text("".join(x for x in good if "MUL_MAT|" not in x and "|usec" not in x or "OPBATCH" in x))
    with pytest.raises(InvalidInputError, match=r"batches\.log: a ggml-hexagon log with no per-op profile line"):
        oplog.read(only_batches)
    cut = tmp_path / "nonl.log"
    cut.write_text("".join(good).rstrip("\n"))
    with pytest.raises(InvalidInputError, match=r"nonl\.log, line \d+: the last line has no end of line"):
        oplog.read(cut)


def test_mixed_log_reads_as_backend_ops_unless_asked(tmp_path):
    mixed = tmp_path / "mixed.txt"
    mixed.write_text(CONSOLE.read_text() + HEX_PIPE.read_text())
    assert {r.fmt for r in oplog.read(mixed)} == {"console"}
    assert {r.fmt for r in oplog.read(mixed, fmt="hexagon")} == {"hexagon"}
    with pytest.raises(InvalidOptionError, match="one of console, csv, sql, hexagon"):
        oplog.read(mixed, fmt="json")
