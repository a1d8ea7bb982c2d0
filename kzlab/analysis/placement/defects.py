"""Known defects of a device backend: where a node the backend accepts computes the wrong values.

supports_op says what a backend takes, not whether it computes it right. A profile's `[[defects]]` tables name
the kernel paths that ggml's own source shows to be wrong, each with its condition (a rule below), the source
line that shows it, the releases it holds for and the fix; the simulator marks every node placed on such a
path (`NodePlacement.defect`), and the what-if never recommends a configuration with a node on a path of the
kind "wrong" (below).

A defect rule sees the node's real ggml tensor and the kernel path the profile's path rule gave it, and returns
a short reason when the node hits the defect, else None.

Two kinds (`kind`). "wrong" (the default): the path computes values that have nothing to do with the op's (an
operand's bytes read as another type), so a configuration with a node on it is wrong output whatever else is
known. "approximation": the path computes another function close to the op's (ggml-hexagon's GELU is
x * sigmoid(1.702 x), not the tanh form), so whether the audio is still right is a question of degree, which
only the emulated decode (`kzlab.analysis.emulate`) against the bound answers: right at or above it, wrong below,
not known without it. The nodes are marked either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ggml import ggml as g

from kzlab.errors import InvalidOptionError

#: the weight types whose HVX products quantize the activations on the DSP (rules.QUANT_HEX)
QUANTIZED = {g.GGML_TYPE_Q4_0, g.GGML_TYPE_Q4_1, g.GGML_TYPE_Q8_0, g.GGML_TYPE_IQ4_NL, g.GGML_TYPE_MXFP4}
DefectRule = Callable[[Any, str], "str | None"]
DEFECT_RULES: dict[str, DefectRule] = {}
#: the keys of one `[[defects]]` table: required ones first
REQUIRED = ("id", "op", "when", "title", "source", "versions", "fix")
OPTIONAL = ("effect", "remedies", "kind")
#: a defect's `kind` (see the module's docstring): wrong values whatever the data, or an approximation to judge
WRONG, APPROXIMATION = "wrong", "approximation"
KINDS = (WRONG, APPROXIMATION)


def kind_of(d: dict) -> str:
    """A defect table's kind ("wrong" when it names none)."""
    return d.get("kind", WRONG)


def wrong_nodes(summaries: list[dict]) -> int:
    """Nodes of `summarize`'s rows whose defect makes the output wrong by itself (an approximation's do not)."""
    return sum(d["n_nodes"] for d in summaries if kind_of(d) == WRONG)


def approximate_nodes(summaries: list[dict]) -> int:
    """Nodes of `summarize`'s rows on a path that approximates their op (judged by the emulated decode)."""
    return sum(d["n_nodes"] for d in summaries if kind_of(d) == APPROXIMATION)


def defect_rule(name: str) -> Callable[[DefectRule], DefectRule]:
    def deco(fn: DefectRule) -> DefectRule:
        DEFECT_RULES[name] = fn
        return fn

    return deco


@defect_rule("hmx_src1_not_f32")
def hmx_src1_not_f32(t, path: str) -> str | None:
    """ggml-hexagon's HMX product reads its activation operand (src1) as F32 whatever its type: the row stride is
    `src1->nb[1] / sizeof(float)` and the data `(float *) src1->data` (htp/matmul-ops.c: 707321c4 lines 4776,
    4811; eced84c8 3047, 3085; 8599e0ea 3335, 3386). An F16 src1 is then read as pairs of F16 values taken for
    one F32, and its last row past the tensor's end."""
    if path != "hmx":
        return None
    s1 = t.contents.src[1]
    if not s1 or int(s1.contents.type) == g.GGML_TYPE_F32:
        return None
    return f"src1 {g.ggml_type_name(int(s1.contents.type)).decode()} on HMX, read as F32"


@defect_rule("hvx_quant_src1_not_f32")
def hvx_quant_src1_not_f32(t, path: str) -> str | None:
    """ggml-hexagon's HVX products of quantized weights quantize their activations on the DSP from F32 rows whatever
    src1's type, while the host accepts an F16 src1 for them (ggml-hexagon.cpp @ 707321c4 2664-2690, @ eced84c8
    2613-2641, @ 8599e0ea 2791-2818; the quantizer: htp/matmul-ops.c @ 707321c4 4178-4226, @ eced84c8 1092-1124,
    @ 8599e0ea 811-843). PR #1601's head changes only HMX's routing, so it keeps this one."""
    if path != "hvx":
        return None
    s0, s1 = t.contents.src[0], t.contents.src[1]
    if not s0 or not s1 or int(s0.contents.type) not in QUANTIZED or int(s1.contents.type) == g.GGML_TYPE_F32:
        return None
    return (f"{g.ggml_type_name(int(s0.contents.type)).decode()} weights with src1 "
            f"{g.ggml_type_name(int(s1.contents.type)).decode()} on HVX, quantized from it read as F32")


@defect_rule("every_node")
def every_node(t, path: str) -> str | None:
    """Every node of the defect's op the backend runs hits it: its kernel computes another function whatever the
    operands (ggml-hexagon's GELU: x * sigmoid(1.702 x), htp/unary-ops.c @ 8599e0ea 295-310)."""
    return f"every {g.ggml_op_desc(t).decode()} the backend runs" + (f" (on {path})" if path else "")


def validate(items: Any, origin: str, op_names: frozenset[str]) -> None:
    """Refuse a malformed `[[defects]]` list (InvalidOptionError naming the key and the file)."""
    if not isinstance(items, list) or not all(isinstance(d, dict) for d in items):
        raise InvalidOptionError(f"capability profile {origin}: defects must be a list of tables ([[defects]])")
    seen = set()
    for d in items:
        where = f"capability profile {origin}: defects.{d.get('id', '?')}"
        for k in d:
            if k not in REQUIRED + OPTIONAL:
                raise InvalidOptionError(f"{where}: unknown key {k!r} (known: {', '.join(REQUIRED + OPTIONAL)})")
        rem = d.get("remedies", [])
        if not isinstance(rem, list) or not all(isinstance(r, str) and r.strip() for r in rem):
            raise InvalidOptionError(f"{where}: remedies must be a list of configuration items (strings such as "
                                     f"'hmx=0' or 'profile=NAME'), not {rem!r}")
        for k in REQUIRED:
            if k not in d:
                raise InvalidOptionError(f"{where}: missing key {k!r}")
            if not isinstance(d[k], str) or not d[k].strip():
                raise InvalidOptionError(f"{where}: {k} must be a non-empty string, not {d[k]!r}")
        if kind_of(d) not in KINDS:
            raise InvalidOptionError(f"{where}: kind must be one of {', '.join(KINDS)}, not {d['kind']!r}")
        if d["when"] not in DEFECT_RULES:
            raise InvalidOptionError(f"{where}: unknown defect rule {d['when']!r} (known: "
                                     f"{', '.join(sorted(DEFECT_RULES))})")
        if d["op"] not in op_names:
            raise InvalidOptionError(f"{where}: op {d['op']!r} is not an op name of this ggml")
        if d["id"] in seen:
            raise InvalidOptionError(f"{where}: the id is given twice")
        seen.add(d["id"])


def defect_of(defects: list[dict], t, path: str) -> tuple[dict, str] | None:
    """The first defect (its table, the reason) a node placed on the backend with kernel path `path` hits."""
    if not defects:
        return None
    desc = g.ggml_op_desc(t).decode()
    for d in defects:
        if d["op"] == desc:
            why = DEFECT_RULES[d["when"]](t, path)
            if why:
                return d, why
    return None


def summarize(defects: list[dict], nodes: list[Any]) -> list[dict[str, Any]]:
    """Per defect of the profile that some node hits: its table (with its `kind`), the nodes, their GFLOP and the
    count per stage."""
    out = []
    for d in defects:
        hit = [n for n in nodes if getattr(n, "defect", "") == d["id"]]
        if not hit:
            continue
        by_stage: dict[str, int] = {}
        for n in hit:
            by_stage[n.stage] = by_stage.get(n.stage, 0) + 1
        out.append({**d, "kind": kind_of(d), "nodes": [n.name for n in hit], "n_nodes": len(hit),
                    "gflop": sum(n.flops for n in hit) / 1e9, "by_stage": by_stage})
    return out
