"""Read the output of llama.cpp's `test-backend-ops perf` (per-op timings measured on a device) into records,
and estimate a node's time from the measured rows of the same op.

The three output formats, as llama.cpp's `tests/test-backend-ops.cpp` writes them (`struct test_result`, its
`get_fields()` / `get_values()`, and the printers `console_printer::print_perf_console`, `sql_printer`,
`csv_printer`; the perf numbers come from `test_case::eval_perf`):

- console (the default): for each device `Backend %zu/%zu: %s` (the device name), then `  Skipping...`, or
  `  Device description: ...` / `  Device memory: ...`, a blank line, one line per test case and
  `  Backend %s: OK` (the backend name). A perf line is `  %s(%s): ` (op, vars) padded to a multiple of 8
  columns, then `    %8d runs - %8.2f us/run - ` and either `%s/run - %sS` (FLOP per run and FLOP/s, each
  `%6.2f` with a k/M/G/T prefix) for ops with a FLOP count, or `%8zu kB/run - %7.2f GB/s`; an unsupported
  case is `  %s(%s): not supported`. The rate is printed between ANSI colour codes, which are stripped here.
- sql (`--output sql`): `CREATE TABLE IF NOT EXISTS test_backend_ops (...);` then one
  `INSERT INTO test_backend_ops (f, ...) VALUES ('v', ...);` per case, every field of test_result, each value
  in single quotes (not escaped), numbers by std::to_string (`%f`, booleans `1`/`0`).
- csv (`--output csv`): a header of quoted field names, then one quoted row per case. The source's
  `csv_printer::get_fields_csv()` keeps only backend_name, op_name, op_params, test_mode, supported,
  error_message and backend_reg_name: a csv written by that source has no time, so its records say
  `time_us=None`. A csv whose header has more test_result fields (a patched binary) is read with them.

test_result's fields: test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed,
error_message, time_us (mean time of one run, in us), flops (FLOP/s: op_flops * runs / seconds, 0 for an op
without a FLOP count), bandwidth_gb_s (op_size * runs / seconds / 2^30, 0 for an op with a FLOP count),
memory_kb (op_size / 1024: the bytes of dst and srcs of one run), n_runs, device_description,
backend_reg_name. Nothing else is invented: the shape is in op_params (test_case::vars(), `name=value,...`,
arrays as `[a,b,c,d]`, ggml types by name, booleans as 0/1).

A fourth format is the per-op log of ggml-hexagon itself, written under `GGML_HEXAGON_PROFILE=1` (or 2, with
PMU counters) by `ggml_hexagon_dump_op_prof` of ggml-org/ggml src/ggml-hexagon/ggml-hexagon.cpp, one GGML_LOG_DEBUG
line per op the HTP ran, the time measured on the HTP itself (llama.cpp's scripts/snapdragon/ggml-hexagon-profile.py
groups these lines by op, dims and types):

- v0.15.2 (707321c4, line 153): `ggml-hex: SESS profile-op OP: NAMES : DIMS : TYPES : STRIDES : usec U cycles C
  start S mhz F[ pmu [p0,...,p7]]`;
- v0.15.3 on (eced84c8 line 150, 78c531d line 167): `ggml-hex: SESS profile-op OP|NAMES|DIMS|TYPES|STRIDES|KPARAMS|`
  then the same tail. 78c531d also writes `profile-op OPBATCH|...` per batch (ggml_hexagon_dump_batch_prof): a
  batch total, skipped here.

OP is the op name (ggml_op_desc; fused ops joined with `+`, e.g. `RMS_NORM+MUL`); NAMES, DIMS, TYPES and STRIDES
list the inputs joined by ` x `, then ` -> ` and the output (htp-opnode.h htp_opformat): a tensor's dims are
`ne0:ne1` when ne2 == ne3 == 1, else `ne0:ne1:ne2:ne3`, its strides the same with nb and a trailing `!` when it is
not contiguous, `NONE` for a missing tensor. Any other line of the log (the program's own output, other ggml-hex
lines) is not read. A file that holds both test-backend-ops output and profile-op lines is read as
test-backend-ops output unless `fmt="hexagon"` is asked for.

A profile-op record says: backend = SESS (HTP0, ...), time_us = usec (one run), n_runs = 1; MUL_MAT gets
test_mul_mat's params (type_a, type_b, m, n, k, bs, nr, per, k_v, o) and its FLOP count, any other op
{type: its first input's type, ne: the output's shape}, so `match` and `match_mul_mat` find them as they find
test-backend-ops and bench-ops rows; a node with a non-contiguous operand gets `contiguous=0` (it ran another
kernel). cycles, start, mhz, pmu, kparams and the raw fields are in `extra`.

Every file that is not one of these (truncated, foreign, a test-mode run) raises InvalidInputError naming the
file and the line.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.errors import InvalidInputError, InvalidOptionError

#: test_result::get_fields() of tests/test-backend-ops.cpp, in its order
FIELDS = (
    "test_time",
    "build_commit",
    "backend_name",
    "op_name",
    "op_params",
    "test_mode",
    "supported",
    "passed",
    "error_message",
    "time_us",
    "flops",
    "bandwidth_gb_s",
    "memory_kb",
    "n_runs",
    "device_description",
    "backend_reg_name",
)
#: csv_printer::get_fields_csv(): the columns a csv of that source has (in FIELDS order when printed)
CSV_FIELDS = ("op_name", "op_params", "supported", "error_message", "test_mode", "backend_reg_name", "backend_name")
REQUIRED = ("backend_name", "op_name", "op_params")

ParamValue = int | float | str | tuple | None

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RESULT = re.compile(r"^  (?P<op>[A-Za-z0-9_]+)\((?P<vars>.*)\): (?P<tail>.*)$")
PERF_FLOPS = re.compile(
    r"^ *(?P<runs>\d+) runs - +(?P<us>[0-9.]+|inf|nan) us/run - +(?P<fpr>[0-9.]+) (?P<fpru>[kMGT])FLOP/run - +"
    r"(?P<rate>[0-9.]+|inf|nan) (?P<rateu>[kMGT])FLOPS$"
)
PERF_BYTES = re.compile(
    r"^ *(?P<runs>\d+) runs - +(?P<us>[0-9.]+|inf|nan) us/run - +(?P<kb>\d+) kB/run - +(?P<bw>[0-9.]+|inf|nan) GB/s$"
)
PREFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
HEX_PROFILE = re.compile(r"ggml-hex: (?P<sess>\S+) profile-op (?P<body>.*?)\r?$")
HEX_TAIL = re.compile(
    r"usec (?P<usec>\d+) cycles (?P<cycles>\d+) start (?P<start>\d+) mhz (?P<mhz>[0-9.]+|nan|inf|-nan)"
    r"(?: pmu \[(?P<pmu>\d+(?:,\d+){7})\])?$"
)
HEX_DIMS = re.compile(r"^(NONE|\d+:\d+(?::\d+:\d+)?)$")
HEX_STRIDES = re.compile(r"^(NONE|\d+:\d+(?::\d+:\d+)?!?)$")
HEX_TYPE = re.compile(r"^[a-z0-9_]+$|^NONE$")
SQL_INSERT = re.compile(r"^INSERT INTO test_backend_ops \((?P<fields>[^)]*)\) VALUES \((?P<values>.*)\);$")


@dataclass
class OpRecord:
    """One test case of a `test-backend-ops` run (perf mode unless `mode` says otherwise)."""

    backend: str  # ggml_backend_name of the backend measured (console: its `  Backend NAME: OK` line)
    op: str  # op_name: ggml_op_desc of the case's output (MUL_MAT, IM2COL, ADD, SIN, GELU, ...)
    vars: str  # op_params as printed: test_case::vars()
    params: dict[str, ParamValue]  # vars parsed: ints, floats, strings (ggml type names), tuples for arrays
    supported: bool
    mode: str = "perf"  # test_mode
    time_us: float | None = None  # mean time of one run (None: not measured, or a csv without the column)
    n_runs: int | None = None
    flops: float | None = None  # FLOP/s; None when the op has no FLOP count (test-backend-ops prints 0)
    flop_per_run: float | None = None  # the console's `FLOP/run`; else flops * time_us / 1e6
    bandwidth_gb_s: float | None = None  # GB/s (2^30 bytes); None for an op with a FLOP count
    memory_kb: int | None = None  # bytes of dst and srcs of one run / 1024
    fmt: str = ""  # console, csv or sql
    file: str = ""
    line: int = 0
    extra: dict[str, str] = field(default_factory=dict)  # the other test_result fields the format carries

    @property
    def types(self) -> dict[str, str]:
        """The ggml types among the params (type, type_a, type_b, type_input, dst_type, ...)."""
        return {k: v for k, v in self.params.items() if isinstance(v, str) and ("type" in k)}

    @property
    def dims(self) -> dict[str, ParamValue]:
        """The shape-related params: integers and integer arrays (m, n, k, ne, ne_input, s0, ...)."""
        return {
            k: v
            for k, v in self.params.items()
            if isinstance(v, int) or (isinstance(v, tuple) and all(isinstance(x, int) for x in v))
        }

    def label(self) -> str:
        return f"{self.op}({self.vars}) on {self.backend}"


# ---- vars ---------------------------------------------------------------------------------------------------------
def _scalar(s: str) -> ParamValue:
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?|-?inf|nan", s):
        return float(s)
    return s


def parse_value(s: str) -> ParamValue:
    """One value of test_case::vars(): `[a,b]` -> tuple, `12` -> int, `0.500000` -> float, else the string."""
    s = s.strip()
    if s.startswith("["):
        if not s.endswith("]"):
            raise ValueError(f"unclosed array {s!r}")
        inner = s[1:-1]
        return tuple(parse_value(x) for x in _split_top(inner)) if inner else ()
    return _scalar(s)


def _split_top(s: str) -> list[str]:
    """Split on commas outside brackets."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {s!r}")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced '[' in {s!r}")
    out.append("".join(cur))
    return out


def parse_vars(s: str) -> dict[str, ParamValue]:
    """test_case::vars() (`type_a=f16,type_b=f32,m=4096,...,bs=[1,1]`) as a dict; ValueError when cut off."""
    if not s:
        return {}
    out: dict[str, ParamValue] = {}
    for item in _split_top(s):
        key, eq, value = item.partition("=")
        out[key.strip()] = parse_value(value) if eq else None
    return out


# ---- reading ------------------------------------------------------------------------------------------------------
def _err(path: str, line: int, msg: str) -> InvalidInputError:
    return InvalidInputError(f"{path}, line {line}: {msg}" if line else f"{path}: {msg}")


def _nonzero(v: float | None) -> float | None:
    return None if v is None or v == 0 else v


def detect(text: str) -> str:
    """'console', 'csv' or 'sql' from the first lines that say it, else 'hexagon' when a line of the file is a
    ggml-hexagon profile-op line; '' when none does."""
    found = _detect_backend_ops(text)
    if found:
        return found
    return "hexagon" if any(HEX_PROFILE.search(x) for x in text.splitlines() if "profile-op" in x) else ""


def _detect_backend_ops(text: str) -> str:
    for raw in text.splitlines()[:200]:
        line = ANSI.sub("", raw).rstrip("\r")
        if not line.strip():
            continue
        if line.startswith(("CREATE TABLE IF NOT EXISTS test_backend_ops", "INSERT INTO test_backend_ops")):
            return "sql"
        if line.startswith('"') and '"op_name"' in line and '"op_params"' in line:
            return "csv"
        if re.match(r"^Testing \d+ devices$", line) or re.match(r"^Backend \d+/\d+: ", line):
            return "console"
    return ""


def read(path: str | Path, fmt: str | None = None) -> list[OpRecord]:
    """The records of a `test-backend-ops` output file; `fmt` (console, csv, sql) is detected when not given."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InvalidInputError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{p}: not text (byte {e.start} is not UTF-8): not test-backend-ops output") from None
    return parse(text, str(p), fmt)


def parse(text: str, name: str = "<text>", fmt: str | None = None) -> list[OpRecord]:
    """Like `read`, from the text itself (`name` names it in errors)."""
    if "\x00" in text:
        raise _err(name, 0, "binary data: not test-backend-ops output")
    found = detect(text)
    if fmt is None:
        fmt = found
    elif fmt not in ("console", "csv", "sql", "hexagon"):
        raise InvalidOptionError(f"op log format {fmt!r}: one of console, csv, sql, hexagon")
    if fmt == "hexagon" and found != "hexagon" and any("profile-op" in x for x in text.splitlines()):
        found = "hexagon"  # asked for: the profile-op lines of a file that also holds test-backend-ops output
    if not fmt or found != fmt:
        what = f"not test-backend-ops {fmt} output" if fmt else "not test-backend-ops output"
        raise _err(
            name,
            0,
            f"{what}: none of its formats (console: 'Testing N devices' / 'Backend i/n: NAME' lines; csv: a header "
            "of quoted test_result fields; sql: 'INSERT INTO test_backend_ops' lines) nor a ggml-hexagon profile log "
            "('ggml-hex: SESS profile-op ...' lines, GGML_HEXAGON_PROFILE=1)"
            + (f"; it looks like {found}" if found and fmt else ""),
        )
    if text and not text.endswith("\n"):
        last = text.count("\n") + 1
        raise _err(name, last, "the last line has no end of line: the output was cut off")
    return {"console": _console, "csv": _csv, "sql": _sql, "hexagon": _hexagon}[fmt](text, name)


def _console(text: str, name: str) -> list[OpRecord]:
    out: list[OpRecord] = []
    device: str | None = None  # the device of the open section
    section: list[OpRecord] = []
    n_results = 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = ANSI.sub("", raw).rstrip("\r")
        if not line.strip():
            continue
        m = re.match(r"^Backend \d+/\d+: (.+)$", line)
        if m:
            if device is not None and section:
                raise _err(name, i, f"backend {device!r} has results but no '  Backend {device}: OK' line before this")
            device, section = m.group(1), []
            continue
        m = re.match(r"^  Backend (.+): (OK|FAIL)$", line)
        if m:
            for r in section:
                r.backend = m.group(1)
            out.extend(section)
            device, section = None, []
            continue
        m = RESULT.match(line)
        if m and not line.startswith("  Device "):
            n_results += 1
            if device is None:
                raise _err(name, i, "a result outside a 'Backend i/n: NAME' section: not the whole output")
            section.append(_console_result(m, device, name, i))
            continue
        if line.startswith("  ") and not re.match(r"^  (Device description: |Device memory: |Skipping)", line):
            raise _err(name, i, f"not a test-backend-ops perf line (cut off, or another tool's output): {line[:80]!r}")
        # other lines: 'Testing N devices', 'N/M backends passed', 'OK', ggml's own log lines: nothing to read
    if device is not None and section:
        raise _err(
            name,
            len(text.splitlines()),
            f"the output ends inside backend {device!r}'s section (no '  Backend {device}: OK' line): cut off",
        )
    if not n_results:
        raise _err(name, 0, "test-backend-ops console output with no perf result in it")
    return out


def _console_result(m: re.Match, device: str, name: str, i: int) -> OpRecord:
    op, vs, tail = m.group("op"), m.group("vars"), m.group("tail").strip()
    try:
        params = parse_vars(vs)
    except ValueError as e:
        raise _err(name, i, f"op params cut off or malformed: {e}") from None
    base = dict(backend=device, op=op, vars=vs, params=params, fmt="console", file=name, line=i)
    if tail == "not supported":
        return OpRecord(supported=False, **base)
    f = PERF_FLOPS.match(tail)
    if f:
        return OpRecord(
            supported=True,
            time_us=float(f.group("us")),
            n_runs=int(f.group("runs")),
            flop_per_run=float(f.group("fpr")) * PREFIX[f.group("fpru")],
            flops=float(f.group("rate")) * PREFIX[f.group("rateu")],
            **base,
        )
    b = PERF_BYTES.match(tail)
    if b:
        return OpRecord(
            supported=True,
            time_us=float(b.group("us")),
            n_runs=int(b.group("runs")),
            memory_kb=int(b.group("kb")),
            bandwidth_gb_s=float(b.group("bw")),
            **base,
        )
    if tail in ("OK", "FAIL", "SUPPORTED", "NOT SUPPORTED") or tail.startswith("not supported ["):
        raise _err(name, i, f"a test/support-mode result ({tail!r}), not a perf measurement (`test-backend-ops perf`)")
    raise _err(name, i, f"perf result cut off or malformed: {tail[:80]!r}")


def _record(values: dict[str, str], fmt: str, name: str, i: int) -> OpRecord:
    try:
        params = parse_vars(values["op_params"])
    except ValueError as e:
        raise _err(name, i, f"op_params cut off or malformed: {e}") from None
    sup = values.get("supported", "1")
    if sup not in ("0", "1"):
        raise _err(name, i, f"supported={sup!r}: expected 1 or 0")
    supported = sup == "1"
    num: dict[str, float | None] = {}
    for k in ("time_us", "flops", "bandwidth_gb_s", "memory_kb", "n_runs"):
        if k in values:
            try:
                num[k] = float(values[k])
            except ValueError:
                raise _err(name, i, f"{k}={values[k]!r} is not a number") from None
    measured = supported and values.get("test_mode", "perf") == "perf"
    t = num.get("time_us") if measured else None
    flops = _nonzero(num.get("flops")) if measured else None
    kb, runs = num.get("memory_kb"), num.get("n_runs")
    known = set(FIELDS)
    return OpRecord(
        backend=values["backend_name"],
        op=values["op_name"],
        vars=values["op_params"],
        params=params,
        supported=supported,
        mode=values.get("test_mode", "perf"),
        time_us=t,
        n_runs=int(runs) if measured and runs is not None else None,
        flops=flops,
        flop_per_run=flops * t / 1e6 if flops is not None and t is not None else None,
        bandwidth_gb_s=_nonzero(num.get("bandwidth_gb_s")) if measured else None,
        memory_kb=int(kb) if measured and kb is not None else None,
        fmt=fmt,
        file=name,
        line=i,
        extra={
            k: v
            for k, v in values.items()
            if k in known and k not in REQUIRED and k not in num and k not in ("supported", "test_mode")
        },
    )


def _check_fields(fields: list[str], name: str, i: int) -> None:
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise _err(name, i, f"columns {unknown} are not test_result fields of test-backend-ops: another tool's output")
    missing = [f for f in REQUIRED if f not in fields]
    if missing:
        raise _err(name, i, f"columns {missing} missing")


def _sql(text: str, name: str) -> list[OpRecord]:
    out: list[OpRecord] = []
    in_create = False
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if line.startswith("CREATE TABLE IF NOT EXISTS test_backend_ops ("):
            in_create = True
            continue
        if in_create:
            if line == ");":
                in_create = False
                continue
            m = re.match(r"^  (\w+) (TEXT|INTEGER|REAL),?$", line)
            if not m:
                raise _err(name, i, f"not a column of the test_backend_ops table: {line[:80]!r}")
            if m.group(1) not in FIELDS:
                raise _err(name, i, f"column {m.group(1)!r} is not a test_result field: another tool's table")
            continue
        m = SQL_INSERT.match(line)
        if not m:
            if line.startswith("INSERT INTO test_backend_ops"):
                raise _err(name, i, "INSERT cut off (no closing ');')")
            if line == "failed to allocate tensors":  # eval_perf's printf: that case was not measured
                continue
            raise _err(name, i, f"not test-backend-ops SQL output: {line[:80]!r}")
        fields = [f.strip() for f in m.group("fields").split(",")]
        _check_fields(fields, name, i)
        body = m.group("values")
        if not (body.startswith("'") and body.endswith("'")):
            raise _err(name, i, "values are not quoted as test-backend-ops writes them")
        values = body[1:-1].split("', '")
        if len(values) != len(fields):
            raise _err(name, i, f"{len(values)} values for {len(fields)} columns")
        out.append(_record(dict(zip(fields, values, strict=True)), "sql", name, i))
    if in_create:
        raise _err(name, len(text.splitlines()), "the CREATE TABLE statement is not closed: cut off")
    if not out:
        raise _err(name, 0, "test-backend-ops SQL output with no INSERT in it")
    return out


def _csv(text: str, name: str) -> list[OpRecord]:
    lines = text.splitlines()
    first = next(i for i, x in enumerate(lines) if x.strip())
    rows: list[tuple[int, list[str]]] = []
    try:
        reader = csv.reader(io.StringIO("\n".join(lines[first:]) + "\n"), strict=True)
        for row in reader:
            rows.append((first + reader.line_num, row))
    except csv.Error as e:
        raise _err(name, first + reader.line_num, f"not valid CSV (cut off?): {e}") from None
    (hi, header), body = rows[0], rows[1:]
    if header and header[-1] == "":  # csv_printer's separator test is on the unfiltered index: a trailing ','
        header = header[:-1]
    _check_fields(header, name, hi)
    out = []
    for i, row in body:
        if not row:
            continue
        if len(row) == len(header) + 1 and row[-1] == "":
            row = row[:-1]
        if len(row) != len(header):
            raise _err(name, i, f"{len(row)} columns for a header of {len(header)}: cut off or another file")
        out.append(_record(dict(zip(header, row, strict=True)), "csv", name, i))
    if not out:
        raise _err(name, hi, "test-backend-ops CSV output with no row in it")
    return out


def _hex_list(field: str, what: str, pattern: re.Pattern, name: str, i: int) -> list[str]:
    """One of htp_opformat's fields: the inputs joined by ' x ', then ' -> ' and the output."""
    ins, arrow, out = field.rpartition(" -> ")
    items = (ins.split(" x ") if arrow else []) + [out]
    for x in items:
        if not pattern.match(x):
            raise _err(name, i, f"profile-op {what} {field!r}: {x!r} is not one tensor's {what}")
    return items


def _hex_ne(d: str) -> tuple[int, ...] | None:
    if d == "NONE":
        return None
    ne = tuple(int(x) for x in d.split(":"))
    return ne + (1,) * (4 - len(ne))


def _vars_text(params: dict[str, ParamValue]) -> str:
    def one(v: ParamValue) -> str:
        return "[" + ",".join(one(x) for x in v) + "]" if isinstance(v, tuple) else str(v)

    return ",".join(f"{k}={one(v)}" for k, v in params.items())


def _hexagon(text: str, name: str) -> list[OpRecord]:
    out: list[OpRecord] = []
    for i, raw in enumerate(text.splitlines(), 1):
        if "profile-op" not in raw:
            continue
        m = HEX_PROFILE.search(raw)
        if not m:
            raise _err(name, i, f"a profile-op line without 'ggml-hex: SESS profile-op ': {raw.strip()[:80]!r}")
        body = m.group("body")
        if body.startswith("OPBATCH|"):  # a batch's total (78c531d ggml_hexagon_dump_batch_prof), not an op
            continue
        if "|usec " in body:  # eced84c8 on: OP|NAMES|DIMS|TYPES|STRIDES|KPARAMS|usec ...
            head, _, tail = body.rpartition("|usec ")
            fields = head.split("|")
            if len(fields) < 6:
                raise _err(name, i, f"profile-op line with {len(fields)} '|' fields before usec (6 expected): cut off?")
            op, names, (dims, types, strides, kparams) = fields[0], "|".join(fields[1:-4]), fields[-4:]
            style = "pipe"
        elif " : usec " in body:  # 707321c4: OP: NAMES : DIMS : TYPES : STRIDES : usec ...
            head, _, tail = body.rpartition(" : usec ")
            op, sep, rest = head.partition(": ")
            parts = rest.rsplit(" : ", 3)
            if not sep or len(parts) != 4:
                raise _err(name, i, "profile-op line without 'OP: NAMES : DIMS : TYPES : STRIDES : usec': cut off?")
            names, dims, types, strides = parts
            kparams, style = "", "colon"
        else:
            raise _err(name, i, f"profile-op line without its 'usec U cycles C ...' tail: cut off? {body[-60:]!r}")
        t = HEX_TAIL.match("usec " + tail)
        if not t:
            raise _err(name, i, f"profile-op timing {('usec ' + tail)[:80]!r} is not 'usec U cycles C start S mhz F'")
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*(\+[A-Z][A-Z0-9_]*)*", op):
            raise _err(name, i, f"profile-op op name {op!r} is not a ggml op")
        d = _hex_list(dims, "dims", HEX_DIMS, name, i)
        ty = _hex_list(types, "types", HEX_TYPE, name, i)
        st = _hex_list(strides, "strides", HEX_STRIDES, name, i)
        if not len(d) == len(ty) == len(st):
            raise _err(name, i, f"profile-op dims, types and strides list {len(d)}, {len(ty)}, {len(st)} tensors")
        ne = [_hex_ne(x) for x in d]
        contiguous = not any(x.endswith("!") for x in st)
        params: dict[str, ParamValue]
        flop_per_run = None
        if op == "MUL_MAT" and len(ne) == 3 and ne[0] and ne[1]:
            a, b = ne[0], ne[1]
            if a[2] == 0 or a[3] == 0 or b[2] % a[2] or b[3] % a[3]:
                raise _err(name, i, f"MUL_MAT dims {dims!r}: src1's batch is not a multiple of src0's")
            params = dict(type_a=ty[0], type_b=ty[1], m=a[1], n=b[1], k=a[0], bs=(a[2], a[3]))
            params.update(nr=(b[2] // a[2], b[3] // a[3]), per=(0, 1, 2, 3), k_v=0, o=1)
            flop_per_run = 2.0 * a[0] * a[1] * b[1] * b[2] * b[3]
        else:
            out_ne = ne[-1]
            if out_ne is None:
                raise _err(name, i, f"profile-op {op} without an output shape")
            params = {"type": ty[0] if len(ty) > 1 and ty[0] != "NONE" else ty[-1], "ne": out_ne}
        if not contiguous:
            params["contiguous"] = 0
        us = float(t.group("usec"))
        out.append(
            OpRecord(
                backend=m.group("sess"),
                op=op,
                vars=_vars_text(params),
                params=params,
                supported=True,
                time_us=us,
                n_runs=1,
                flops=flop_per_run / (us * 1e-6) if flop_per_run is not None and us > 0 else None,
                flop_per_run=flop_per_run,
                fmt="hexagon",
                file=name,
                line=i,
                extra={
                    "cycles": t.group("cycles"),
                    "start": t.group("start"),
                    "mhz": t.group("mhz"),
                    "pmu": t.group("pmu") or "",
                    "kparams": kparams,
                    "names": names,
                    "dims": dims,
                    "types": types,
                    "strides": strides,
                    "style": style,
                },
            )
        )
    if not out:
        raise _err(name, 0, "a ggml-hexagon log with no per-op profile line in it (only OPBATCH totals?)")
    return out


# ---- looking a node up ----------------------------------------------------------------------------------------------
@dataclass
class Estimate:
    """A node's time from measured rows of the same op and key: exact, interpolated or extrapolated."""

    time_us: float
    how: str  # "exact" | "interpolated" | "extrapolated"
    op: str
    backend: str
    row_param: str
    rows: int  # the row count asked for
    used: list[tuple[int, float]]  # (row count, mean time_us) of the measured points the estimate rests on
    records: list[OpRecord] = field(default_factory=list)

    def describe(self) -> str:
        pts = ", ".join(f"{self.row_param}={n}: {t:.2f} us" for n, t in self.used)
        head = f"{self.op} {self.row_param}={self.rows} on {self.backend}"
        return f"{head}: {self.time_us:.2f} us ({self.how} from {pts})"


def _norm(v: Any) -> ParamValue:
    """A query value in the form parse_vars gives (so 'f16', [1, 1], '[1,1]', True all compare)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    if isinstance(v, str):
        try:
            return parse_value(v)
        except ValueError:
            return v
    if isinstance(v, float) and v.is_integer():
        return v
    if hasattr(v, "__index__"):
        return int(v)
    return v


def _backend_family(name: str) -> str:
    m = re.match(r"[A-Za-z]+", name)
    return (m.group(0) if m else name).upper()


def _row_split(params: Mapping[str, ParamValue], name: str, idx: int | None) -> tuple[Any, dict[str, ParamValue]]:
    """(the row count, the key: every param with the row count taken out) of normalised params."""
    key = dict(params)
    if idx is None:
        return key.pop(name, None), key
    arr = key.get(name)
    if not isinstance(arr, tuple) or idx >= len(arr):
        return None, key
    key[name] = arr[:idx] + (None,) + arr[idx + 1 :]
    return arr[idx], key


def match(
    records: Iterable[OpRecord],
    op: str,
    params: Mapping[str, Any],
    *,
    row_param: str = "n",
    backend: str | None = None,
) -> Estimate | None:
    """The time of a node from the measured perf rows of the same op and key.

    The key is (op, every param but the row count): a row matches when it has exactly the params of `params`
    with equal values, the row count aside. `row_param` names the row count: a param (`n` of MUL_MAT) or an
    element of an array param (`ne[1]` of ADD or SIN). Rows measured more than once are averaged. The row
    count is then found exactly, or interpolated linearly between the nearest measured counts below and above,
    or extrapolated proportionally (time * n / n_nearest) beyond the measured range. None when no measured row
    has the key. `backend` picks the rows of one backend: ggml's name, case-insensitive ("CPU", "HTP0"), else
    its family ("HTP" for "HTP0"); rows of several backends and no `backend` are refused.
    """
    m = re.fullmatch(r"(\w+)\[(\d+)\]", row_param)
    name, idx = (m.group(1), int(m.group(2))) if m else (row_param, None)
    if name not in params:
        raise InvalidOptionError(f"match: the params give no {name!r} (the row-count parameter {row_param})")
    n, key = _row_split({k: _norm(v) for k, v in params.items()}, name, idx)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidOptionError(f"match: {row_param}={n!r}: expected an integer >= 1")
    rows: list[tuple[int, OpRecord]] = []
    for r in records:
        if r.op != op or r.mode != "perf" or not r.supported or r.time_us is None or not math.isfinite(r.time_us):
            continue
        rn, rkey = _row_split(r.params, name, idx)
        if rkey == key and isinstance(rn, int) and rn >= 1:
            rows.append((rn, r))
    if backend is not None:
        same = [x for x in rows if x[1].backend.lower() == backend.lower()]
        rows = same or [x for x in rows if _backend_family(x[1].backend) == _backend_family(backend)]
    if not rows:
        return None
    backends = sorted({r.backend for _, r in rows})
    if len(backends) > 1:
        raise InvalidOptionError(f"match: {op} was measured on {', '.join(backends)}: say which with backend=")
    by_n: dict[int, list[OpRecord]] = {}
    for rn, r in rows:
        by_n.setdefault(rn, []).append(r)
    pts = sorted((k, sum(r.time_us or 0.0 for r in v) / len(v)) for k, v in by_n.items())

    def est(t: float, how: str, used: list[tuple[int, float]]) -> Estimate:
        rec = [r for u, _ in used for r in by_n[u]]
        return Estimate(t, how, op, backends[0], row_param, n, used, rec)

    for k, t in pts:
        if k == n:
            return est(t, "exact", [(k, t)])
    lo = [p for p in pts if p[0] < n]
    hi = [p for p in pts if p[0] > n]
    if lo and hi:
        (n0, t0), (n1, t1) = lo[-1], hi[0]
        return est(t0 + (t1 - t0) * (n - n0) / (n1 - n0), "interpolated", [(n0, t0), (n1, t1)])
    n0, t0 = lo[-1] if lo else hi[0]
    return est(t0 * n / n0, "extrapolated", [(n0, t0)])


def match_mul_mat(
    records: Iterable[OpRecord],
    type_a: str,
    type_b: str,
    m: int,
    n: int,
    k: int,
    *,
    backend: str | None = None,
    bs: tuple[int, int] = (1, 1),
    nr: tuple[int, int] = (1, 1),
    per: tuple[int, int, int, int] = (0, 1, 2, 3),
    k_v: int = 0,
    o: int = 1,
) -> Estimate | None:
    """`match` for a MUL_MAT: test_mul_mat's vars (type_a, type_b, m, n, k, bs, nr, per, k_v, o); the defaults
    describe a plain 2-D product (no batch, no broadcast, no permutation, contiguous k, one output). For a ggml
    node: type_a = src0 type, type_b = src1 type, m = src0.ne[1], n = src1.ne[1] (rows), k = src0.ne[0]."""
    params = dict(type_a=type_a, type_b=type_b, m=m, n=n, k=k, bs=bs, nr=nr, per=per, k_v=k_v, o=o)
    return match(records, "MUL_MAT", params, row_param="n", backend=backend)
