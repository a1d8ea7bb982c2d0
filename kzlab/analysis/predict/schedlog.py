"""Read a `GGML_SCHED_DEBUG` log of the real ggml scheduler and compare it with kzlab's simulated placement.

What ggml prints (ggml/src/ggml-backend.cpp, `ggml_backend_sched_print_assignments`, called at the end of
`ggml_backend_sched_split_graph` when `sched->debug` is set; `sched->debug = atoi(getenv("GGML_SCHED_DEBUG"))`
is read in `ggml_backend_sched_new`). Everything goes through GGML_LOG_DEBUG, one fragment per call:

- level >= 1, at the first node of each split:
  `"\\n## SPLIT #%d: %s # %d inputs"` (split index, ggml_backend_name of the split's backend, its input
  count), then `": "` before the first input and `"[%s (%5.5s)] "` per input (the tensor's name in full and
  fmt_size(ggml_nbytes): `%zuM` from 1 MiB up, else `%zuK`, both floored), then `"\\n"`.
- level >= 2, one line per node that is not a view op (VIEW, RESHAPE, PERMUTE, TRANSPOSE are skipped):
  `"node #%3d (%10.10s): %20.20s (%5.5s) [%5.5s %8.8s] use=%d,c=%d:"` (graph index, op (ggml_op_desc),
  node name, size, ggml_backend_name of its backend or "NULL", the cause (empty unless ggml was built with
  the debug causes), use count, compute flag), then per source `" %20.20s (%5.5s) [%5.5s %8.8s]"`, then
  `"\\n"`. Older ggml (before the use count) prints no ` use=%d,c=%d`; both are read.

`%20.20s` and `%5.5s` cut: a node or source name keeps its first 20 characters, a backend name its first 5
("RPC[127.0.0.1:50052]" -> "RPC[1"). Nodes are therefore matched to kzlab's by graph index (the `node #`
number), the printed name checked against the first 20 characters of kzlab's. A node's 5-character backend
is resolved against the full names of the split lines when one starts with it.

Each scheduling of a graph (a reserve, an alloc, a compute of a new graph) prints one pass, starting at
`## SPLIT #0`; a log may hold several (`SchedLog.passes`); comparisons use one (the last by default).
Lines that are neither split nor node lines (other logging) are skipped. A log cut in the middle of a line,
a split line whose input count does not match its inputs, a gap in the split numbers, node numbers that go
back, a node line before any split line, or a split without its node lines at level 2 is refused
(InvalidInputError naming the file and line), as is a file with no `## SPLIT #` line at all.

Backend names: ggml prints `ggml_backend_name` ("CPU", "BLAS", "RPC[host:port]", "CUDA0", "HTP0", "Vulkan0",
"MTL0"...), kzlab's simulator the profile's backend ("CPU", "BLAS", "RPC", "CUDA", "HTP") or the names given
to `simulate(backends=...)`. Both sides are compared through `family()`: the leading letters, upper-cased,
then `ALIASES` (so "RPC[127.0.0.1:50052]" and "RPC" -> RPC, "HTP0" -> HTP, "CUDA0" -> CUDA, "blas" -> BLAS).
"""

from __future__ import annotations

import ctypes
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kzlab.errors import InvalidInputError

if TYPE_CHECKING:
    from kzlab.analysis.placement.simulate import Placement
    from kzlab.graph.options import Lowering
    from kzlab.model.model import Model

#: backend family after the leading letters are taken and upper-cased: names that differ between ggml and kzlab
ALIASES = {
    "MTL": "METAL",  # ggml-metal's backend is "MTL0" in recent ggml
    "VULKA": "VULKAN",  # a node line's %5.5s cut of "Vulkan0"
    "OPENC": "OPENCL",
    "HEXAGON": "HTP",
}
VIEW_OPS = ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")

SPLIT_RX = re.compile(r"^## SPLIT #(\d+): (.+?) # (\d+) inputs(?:: (.*))?$")
INPUT_RX = re.compile(r"\[(.*?) \((.{5})\)\] ")
NODE_RX = re.compile(
    r"^node #\s*(\d+) \((.{10})\): (.{20}) \((.{5})\) \[(.{5}) (.{8})\](?: use=(\d+),c=(\d+))?:(.*)$", re.S
)
SRC_RX = re.compile(r" (.{20}) \((.{5})\) \[(.{5}) (.{8})\]", re.S)
SRC_WIDTH = 46  # " " + 20 + " (" + 5 + ") [" + 5 + " " + 8 + "]"


def family(name: str) -> str:
    """The backend family a ggml or kzlab backend name stands for (see the module doc)."""
    m = re.match(r"[A-Za-z]+", name.strip())
    f = m.group(0).upper() if m else name.strip().upper()
    return ALIASES.get(f, f)


def size_bytes(s: str) -> int:
    """The lower bound of fmt_size's `%zuK` / `%zuM` (floored) in bytes."""
    s = s.strip()
    if not re.fullmatch(r"\d+[KM]", s):
        raise ValueError(f"not a ggml size {s!r}")
    return int(s[:-1]) * (1024 if s[-1] == "K" else 1024 * 1024)


@dataclass
class SplitInput:
    name: str
    size: str  # as printed: "12K", "3M"
    bytes_at_least: int


@dataclass
class LoggedSplit:
    index: int
    backend: str  # ggml_backend_name, in full
    inputs: list[SplitInput]
    line: int
    nodes: list[int] = field(default_factory=list)  # graph indices of the node lines under it (level 2)


@dataclass
class Source:
    name: str  # first 20 characters
    size: str
    backend: str  # as printed (5 characters at most), "NULL" when unassigned
    cause: str


@dataclass
class NodeLine:
    index: int  # the graph index (node #)
    op: str  # first 10 characters of ggml_op_desc (ggml_op_name in older ggml)
    name: str  # first 20 characters of the node's name
    size: str
    backend: str  # the split line's full name when the printed 5 characters begin one, else as printed
    printed_backend: str
    cause: str
    use: int | None
    compute: bool | None
    sources: list[Source]
    split: int
    line: int


@dataclass
class SchedPass:
    """One printout of ggml_backend_sched_print_assignments: the splits, and at level 2 every non-view node."""

    splits: list[LoggedSplit]
    nodes: list[NodeLine]
    line: int  # where it starts in the file

    @property
    def level(self) -> int:
        return 2 if self.nodes else 1

    @property
    def n_splits(self) -> int:
        return len(self.splits)

    def assignment(self) -> list[tuple[int, str, str]]:
        """(graph index, node name as printed, backend) of every node line; names are cut to 20 characters and
        need not be unique, so the index is the key."""
        return [(n.index, n.name, n.backend) for n in self.nodes]

    def by_backend(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.backend] = out.get(n.backend, 0) + 1
        return out


@dataclass
class SchedLog:
    file: str
    passes: list[SchedPass]

    def pass_(self, index: int = -1) -> SchedPass:
        try:
            return self.passes[index]
        except IndexError:
            raise InvalidInputError(
                f"{self.file}: no scheduling pass {index} (the log holds {len(self.passes)})"
            ) from None

    @property
    def splits(self) -> list[LoggedSplit]:
        """The last pass's splits."""
        return self.passes[-1].splits

    @property
    def nodes(self) -> list[NodeLine]:
        """The last pass's node lines."""
        return self.passes[-1].nodes


# ---- reading ---------------------------------------------------------------------------------------------------
def read(path: str | Path) -> SchedLog:
    """Parse a GGML_SCHED_DEBUG log file (level 1 or 2)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InvalidInputError(f"{p}: cannot read: {e.strerror or e}") from None
    return parse(raw, str(p))


def parse(text: str | bytes, name: str = "<log>") -> SchedLog:
    """Like `read`, from the log's text (`name` names it in errors)."""
    if isinstance(text, str):
        text = text.encode("utf-8", errors="surrogateescape")
    if b"\x00" in text:
        raise InvalidInputError(f"{name}: binary data, not a GGML_SCHED_DEBUG log")
    # ggml pads and cuts in bytes (%20.20s): read bytes as latin-1 so widths hold, names decoded afterwards
    s = text.decode("latin-1")
    lines = s.split("\n")
    ends_open = lines[-1] != ""
    if not ends_open:
        lines = lines[:-1]
    passes: list[SchedPass] = []
    cur: SchedPass | None = None

    def err(i: int, msg: str) -> InvalidInputError:
        return InvalidInputError(f"{name}, line {i}: {msg}")

    for i, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        is_split, is_node = line.startswith("## SPLIT #"), line.startswith("node #")
        if (is_split or is_node) and ends_open and i == len(lines):
            raise err(i, "the last line has no end of line: the log was cut off")
        if is_split:
            m = SPLIT_RX.match(line)
            if not m:
                raise err(i, f"split line cut off or malformed: {line[:100]!r}")
            k, backend, n_in = int(m.group(1)), _text(m.group(2)), int(m.group(3))
            ins = [
                SplitInput(_text(x.group(1)), x.group(2).strip(), _size(x.group(2), err, i))
                for x in INPUT_RX.finditer((m.group(4) or "") + " ")
            ]
            if len(ins) != n_in:
                raise err(i, f"split #{k} says {n_in} inputs but {len(ins)} are printed: cut off")
            if k == 0:
                if cur is not None:
                    _close(cur, err)
                cur = SchedPass([], [], i)
                passes.append(cur)
            elif cur is None:
                raise err(i, f"split #{k} before any split #0: the log starts in the middle of a pass")
            elif k != len(cur.splits):
                raise err(i, f"split #{k} follows split #{len(cur.splits) - 1}: lines are missing")
            cur.splits.append(LoggedSplit(k, backend, ins, i))
        elif is_node:
            if cur is None:
                raise err(i, "a node line before any '## SPLIT #' line: the log starts in the middle of a pass")
            node = _node(line, err, i, cur)
            if cur.nodes and node.index <= cur.nodes[-1].index:
                raise err(i, f"node #{node.index} after node #{cur.nodes[-1].index}: not one pass")
            cur.nodes.append(node)
            cur.splits[-1].nodes.append(node.index)
    if cur is None:
        raise InvalidInputError(
            f"{name}: not a GGML_SCHED_DEBUG log: no '## SPLIT #' line (set GGML_SCHED_DEBUG=2 before the "
            "scheduler is created, and keep ggml's debug log)"
        )
    _close(cur, err)
    return SchedLog(name, passes)


def _text(s: str) -> str:
    return s.encode("latin-1").decode("utf-8", errors="replace")


def _size(s: str, err, i: int) -> int:
    try:
        return size_bytes(s)
    except ValueError as e:
        raise err(i, str(e)) from None


def _close(p: SchedPass, err) -> None:
    if p.nodes:  # level 2: every split starts at a node that is printed
        for sp in p.splits:
            if not sp.nodes:
                raise err(sp.line, f"split #{sp.index} has no node lines (level 2): lines are missing")


def _node(line: str, err, i: int, cur: SchedPass) -> NodeLine:
    m = NODE_RX.match(line)
    if not m:
        raise err(i, f"node line cut off or malformed: {line[:100]!r}")
    rest = m.group(9)
    if len(rest) % SRC_WIDTH:
        raise err(i, "node line's sources cut off")
    srcs = []
    for j in range(0, len(rest), SRC_WIDTH):
        s = SRC_RX.fullmatch(rest[j : j + SRC_WIDTH])
        if not s:
            raise err(i, f"node line's source {j // SRC_WIDTH} malformed: {rest[j : j + SRC_WIDTH]!r}")
        srcs.append(Source(_text(s.group(1)).lstrip(), s.group(2).strip(), s.group(3).strip(), s.group(4).strip()))
    printed = m.group(5).strip()
    return NodeLine(
        index=int(m.group(1)),
        op=m.group(2).strip(),
        name=_text(m.group(3)).lstrip(),
        size=m.group(4).strip(),
        backend=_resolve(printed, cur.splits),
        printed_backend=printed,
        cause=m.group(6).strip(),
        use=int(m.group(7)) if m.group(7) is not None else None,
        compute=bool(int(m.group(8))) if m.group(8) is not None else None,
        sources=srcs,
        split=cur.splits[-1].index,
        line=i,
    )


def _resolve(printed: str, splits: list[LoggedSplit]) -> str:
    full = {sp.backend for sp in splits if sp.backend.startswith(printed)}
    return full.pop() if len(full) == 1 else printed


# ---- capturing on this machine -----------------------------------------------------------------------------------
@contextmanager
def sched_debug(level: int = 2):
    """Set GGML_SCHED_DEBUG=`level` and collect ggml's log (a list of fragments) while inside; both restored on
    exit. The variable is read when a scheduler is created: create it inside."""
    from ggml import ggml as g

    text: list[str] = []
    prev_cb, prev_ud = g.ggml_log_callback(), ctypes.c_void_p()
    g.ggml_log_get(ctypes.byref(prev_cb), ctypes.byref(prev_ud))
    cb = g.ggml_log_callback(lambda lvl, msg, ud: text.append(msg.decode("utf-8", errors="replace")))
    old = os.environ.get("GGML_SCHED_DEBUG")
    os.environ["GGML_SCHED_DEBUG"] = str(level)
    g.ggml_log_set(cb, None)
    try:
        yield text
    finally:
        g.ggml_log_set(prev_cb, prev_ud)
        if old is None:
            os.environ.pop("GGML_SCHED_DEBUG", None)
        else:
            os.environ["GGML_SCHED_DEBUG"] = old


def capture(model: Model, lowering: Lowering, backend: list[str], frames: int, level: int = 2) -> str:
    """The real scheduler's GGML_SCHED_DEBUG log for the decoder graph of `frames` frames on `backend` (a
    scheduler list, CPU last, as kzlab.load takes it): one fresh graph, split and allocated once."""
    from ggml import ggml as g

    from kzlab.analysis.placement.graph import build
    from kzlab.runtime.session import Session

    s = Session(model, lowering, backend=backend, sched=True, threads=1)
    try:
        wt = s.ensure_weights()
        bs = s.backends
        gr = build(model, s.plan, frames, weights=wt)
        try:
            with sched_debug(level) as log:
                bs.new_sched()  # a fresh one: the level is read here
                g.ggml_backend_sched_reset(bs.sched)
                if not g.ggml_backend_sched_alloc_graph(bs.sched, gr.gf):
                    raise RuntimeError("the real scheduler could not allocate the graph")
            g.ggml_backend_sched_reset(bs.sched)
            return "".join(log)
        finally:
            gr.builder.free()
    finally:
        s.close()


# ---- the comparison ----------------------------------------------------------------------------------------------
@dataclass
class Disagreement:
    index: int
    name: str  # kzlab's full node name
    op: str
    simulated: str  # kzlab's backend name
    real: str  # ggml's backend name (resolved from the split lines when possible)


@dataclass
class SplitDiff:
    index: int
    simulated: tuple[str, list[str]] | None  # (backend, input names); None: no such split there
    real: tuple[str, list[str]] | None


@dataclass
class PlacementDiff:
    """Simulated (kzlab) vs real (a GGML_SCHED_DEBUG=2 log) placement of the same graph, node by node."""

    n_compared: int
    disagreements: list[Disagreement] = field(default_factory=list)
    only_simulated: list[tuple[int, str]] = field(default_factory=list)  # non-view nodes absent from the log
    only_real: list[tuple[int, str]] = field(default_factory=list)  # log nodes the simulation lacks (or has as views)
    name_mismatches: list[tuple[int, str, str]] = field(default_factory=list)  # (index, kzlab name, printed name)
    n_splits_sim: int = 0
    n_splits_real: int = 0
    split_diffs: list[SplitDiff] = field(default_factory=list)
    passes: int = 1  # passes in the log
    pass_index: int = -1  # the one compared

    @property
    def ok(self) -> bool:
        return not (
            self.disagreements or self.only_simulated or self.only_real or self.name_mismatches or self.split_diffs
        )

    def summary(self, limit: int = 50) -> str:
        lines = []
        if self.passes > 1:
            lines.append(f"the log holds {self.passes} scheduling passes; compared pass {self.pass_index}")
        if not self.disagreements:
            lines.append(f"no disagreement on {self.n_compared} nodes")
        else:
            lines.append(f"{len(self.disagreements)} of {self.n_compared} nodes disagree (node: simulated -> real):")
            for d in self.disagreements[:limit]:
                lines.append(f"  #{d.index:<5} {d.name} ({d.op}): {d.simulated} -> {d.real}")
            if len(self.disagreements) > limit:
                lines.append(f"  ... {len(self.disagreements) - limit} more")
        if self.name_mismatches:
            lines.append(f"{len(self.name_mismatches)} nodes have other names in the log (not the same graph?):")
            lines += [f"  #{i:<5} {a!r} vs {b!r}" for i, a, b in self.name_mismatches[:limit]]
        if self.only_simulated:
            lines.append(f"{len(self.only_simulated)} simulated nodes are not in the log (cut off, or another graph)")
            lines += [f"  #{i:<5} {n}" for i, n in self.only_simulated[:limit]]
        if self.only_real:
            lines.append(f"{len(self.only_real)} logged nodes are not in the simulation:")
            lines += [f"  #{i:<5} {n}" for i, n in self.only_real[:limit]]
        same = "same" if self.n_splits_sim == self.n_splits_real else "differ"
        lines.append(f"splits: simulated {self.n_splits_sim}, real {self.n_splits_real} ({same})")
        for d in self.split_diffs[:limit]:
            sim = f"{d.simulated[0]} {d.simulated[1]}" if d.simulated else "-"
            real = f"{d.real[0]} {d.real[1]}" if d.real else "-"
            lines.append(f"  split #{d.index}: simulated {sim}; real {real}")
        return "\n".join(lines)


def diff_placement(log: SchedLog, placement: Placement, pass_index: int = -1) -> PlacementDiff:
    """Node-by-node and split-by-split differences between a real scheduler log (level 2) and a simulation of
    the same graph. Nodes are matched by graph index; backends compared by `family()`."""
    p = log.pass_(pass_index)
    if not p.nodes:
        raise InvalidInputError(
            f"{log.file}: the log has no node lines (GGML_SCHED_DEBUG=1): capture it with GGML_SCHED_DEBUG=2"
        )
    sim = placement.nodes
    out = PlacementDiff(0, passes=len(log.passes), pass_index=pass_index % len(log.passes))
    logged = {n.index: n for n in p.nodes}
    for i, nd in enumerate(sim):
        ln = logged.get(i)
        if ln is None:
            if nd.op not in VIEW_OPS:
                out.only_simulated.append((i, nd.name))
            continue
        if nd.op in VIEW_OPS:
            out.only_real.append((i, ln.name))
            continue
        if ln.name != nd.name[:20].lstrip():
            out.name_mismatches.append((i, nd.name, ln.name))
            continue
        out.n_compared += 1
        if family(ln.backend) != family(nd.backend):
            out.disagreements.append(Disagreement(i, nd.name, nd.op, nd.backend, ln.backend))
    out.only_real += [(n.index, n.name) for n in p.nodes if n.index >= len(sim)]
    out.n_splits_sim, out.n_splits_real = placement.n_splits, p.n_splits
    for k in range(max(out.n_splits_sim, out.n_splits_real)):
        a = placement.splits[k] if k < out.n_splits_sim else None
        b = p.splits[k] if k < out.n_splits_real else None
        sa = (a.backend, list(a.inputs)) if a else None
        sb = (b.backend, [x.name for x in b.inputs]) if b else None
        if sa is None or sb is None or family(sa[0]) != family(sb[0]) or sa[1] != sb[1]:
            out.split_diffs.append(SplitDiff(k, sa, sb))
    return out
