"""The report's what-if section: which configuration to try on the device first, as probabilities.

It shows what `kzlab.whatif` (or `kzlab whatif --json`) answered, from the `WhatIf` itself or its JSON: every
configuration's predicted total as a range, each pair's P(A faster than B) with the ratio's spread, P(within the
target), what the decision rests on, the next measurement with the device commands, and, when device totals
were given, which parameters they identified, which they left at their prior and what they flagged.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kzlab import plots
from kzlab.analysis.predict.decide import SETTLED
from kzlab.errors import InvalidInputError
from kzlab.report.elements import figure_tag, table

#: the keys a what-if JSON has (the contract `kzlab whatif --json` writes)
REQUIRED = ("configs", "pairs", "sensitivity", "next_measurements")


def read_whatif(path: str | Path) -> dict[str, Any]:
    """The JSON `kzlab whatif --json` wrote, checked for the keys the section shows."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"{p}: no such what-if file (write one with `kzlab whatif MODEL ... --json {p}`)")
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidInputError(f"{p}: not a what-if result (not JSON: {e})") from None
    return check_whatif(d, str(p))


def check_whatif(d: Any, where: str = "what-if") -> dict[str, Any]:
    """Refuse what is not a what-if result, naming what is missing."""
    if not isinstance(d, Mapping):
        raise InvalidInputError(f"{where}: not a what-if result (a JSON object with {', '.join(REQUIRED)})")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise InvalidInputError(f"{where}: not a what-if result: no {', '.join(missing)}")
    for name, c in (d["configs"] or {}).items():
        r = c.get("range") if isinstance(c, Mapping) else None
        if not isinstance(r, Mapping) or any(k not in r for k in ("p10", "p50", "p90", "min", "max")):
            raise InvalidInputError(f"{where}: configuration {name!r} has no range (p10, p50, p90, min, max)")
    for p in d["pairs"]:
        if not isinstance(p, Mapping) or any(k not in p for k in ("a", "b", "p_a_faster", "ratio")):
            raise InvalidInputError(f"{where}: a pair without a, b, p_a_faster and ratio: {p!r}")
    return dict(d)


def _ms(v: Any) -> str:
    return f"{float(v):.0f}" if isinstance(v, int | float) else ""


def decision_sentence(d: Mapping) -> str:
    """The answer in one line: a probability and, when the decision is open, what would settle it."""
    dd = d.get("decision") or {}
    if not dd:
        return "one configuration: nothing to decide between"
    state = f"settled (P below {SETTLED:g} or above {1 - SETTLED:g})" if dd.get("settled") else "not settled"
    if dd.get("unsettled_by"):
        state = ("not settled whatever P says: it rests on " + ", ".join(
            f"{u['parameter']} ({u['share']:.2f} of its variance, flagged {'/'.join(u.get('kinds') or [])})"
            for u in dd["unsettled_by"]))
    text = f"{dd['a']} is faster than {dd['b']} with P = {dd['p_a_faster']:.2f}: {state}"
    scope = dd.get("scope") or {}
    if scope.get("kind") == "different":
        text += (f" (different stages under the scheduler: {_stages(scope['a_stages'])} against "
                 f"{_stages(scope['b_stages'])})")
    nxt = d.get("next_measurements") or []
    if nxt:
        m = nxt[0]
        text += (f". Next measurement: {m['parameter']} (the decision's p10-p90 spread in log ratio "
                 f"{m.get('spread_before', float('nan')):.2f} -> {m.get('spread_after', float('nan')):.2f}; settled "
                 f"afterwards with P {m.get('p_settled_after', float('nan')):.2f})")
    return text


def _stages(stages: Any) -> str:
    return stages if isinstance(stages, str) else "+".join(stages)


def _pre(text: str) -> str:
    return f"<pre><code>{html.escape(text)}</code></pre>"


def whatif_html(obj: Any, index: int = 1) -> str:
    """The section for one what-if (a `WhatIf`, a `Decision`, or the JSON of either)."""
    d = check_whatif(plots.decision_dict(obj))
    q = d.get("question") or {}
    parts = [f'<h2 id="whatif{index}">What-if {index}: which configuration to try first</h2>']
    if q:
        asked = {"model": q.get("model"), "frames": q.get("frames"), "lowering": q.get("lowering_label"),
                 "CPU-only baseline ms": q.get("cpu_baseline_ms"), "target ms": q.get("target_ms"),
                 "measured on the device": ", ".join(f"{k}={v:g} ms" for k, v in (q.get("measured") or {}).items()),
                 "op logs": ", ".join(q.get("ops") or [])}
        parts.append(table({k: v for k, v in asked.items() if v not in (None, "")}))
    parts.append(f"<p>{d.get('draws')} paired draws (seed {d.get('seed')}) from {html.escape(str(d.get('draws_from')))}"
                 ": each draw is one possible device for every configuration.</p>")
    parts.append(f"<p><b>{html.escape(decision_sentence(d))}</b></p>")
    rec = d.get("recommendation") or {}
    if rec:
        who = rec.get("name")
        text = (f"recommended: {who}, {rec.get('why', '')}" if who else f"recommended: none ({rec.get('why', '')})")
        parts.append(f"<p><b>{html.escape(text)}</b></p>")
        for w in rec.get("faster_but_wrong") or []:
            parts.append(f'<p class="flag">not recommended though faster: {html.escape(w["name"])} (P(faster) = '
                         f'{w["p_faster"]:.2f}): WRONG OUTPUT, {html.escape(w["why"])}</p>')
    parts.append(figure_tag(plots.decision(d), "what-if decision"))
    target, tms = d.get("target") or {}, d.get("target_ms")
    rows = []
    for name, c in d["configs"].items():
        r = c["range"]
        mem = c.get("memory") or {}
        row = {"configuration": name, "profile": c.get("profile", ""), "splits": c.get("splits", ""),
               "p10 ms": _ms(r["p10"]), "p50 ms": _ms(r["p50"]), "p90 ms": _ms(r["p90"]), "min ms": _ms(r["min"]),
               "max ms": _ms(r["max"])}
        first = c.get("first_decode") or {}
        if any((x.get("first_decode") or {}) for x in d["configs"].values()):
            fr = first.get("range", first) if isinstance(first, Mapping) else {}
            row["first decode p50 ms"] = _ms(fr.get("p50")) if fr else ""
        if tms is not None:
            row[f"P(<= {tms:g} ms)"] = f"{target.get(name, float('nan')):.2f}"
        row["memory"] = ", ".join(f"{b} {m['total_bytes'] / 1e6:.0f} MB" + ("" if m.get("fits") in (True, None)
                                                                             else " OVER BUDGET")
                                  for b, m in mem.items())
        row["lowering"] = c.get("lowering", "")
        if "correct" in c:  # the emulated device arithmetic (kzlab.analysis.emulate) beside the time
            acc = c.get("accuracy") or {}
            snr = acc.get("snr_db")
            row["audio"] = ("right" if c["correct"] is True else "WRONG OUTPUT" if c["correct"] is False
                            else "not known")
            row["wav SNR dB"] = f"{snr:.1f}" if isinstance(snr, int | float) else (snr or "")
            row["why"] = c.get("why", "")  # a right one's: the approximations its bound let through
            if c.get("variant_of"):
                row["configuration"] = f"{name} (correct variant of {c['variant_of']})"
        rows.append(row)
    parts.append("<h3>Configurations (predicted total, paired draws)</h3>" + table(rows))
    needs = [{"configuration": name, f"P(<= {tms:g} ms)": f"{c['needs']['p_now']:.2f}",
              "what reaching it with P >= 0.5 would take": c["needs"]["text"]}
             for name, c in d["configs"].items() if tms is not None and c.get("needs")]
    if needs:
        parts.append("<h3>What reaching the target would take</h3>" + table(needs))
    prs = []
    for p in d["pairs"]:
        row = {"A": p["a"], "B": p["b"], "P(A faster than B)": f"{p['p_a_faster']:.2f}",
               "ratio A/B p10": f"{p['ratio']['p10']:.2f}", "p50": f"{p['ratio']['p50']:.2f}",
               "p90": f"{p['ratio']['p90']:.2f}"}
        scope = p.get("scope")
        if scope:
            row["stages under the scheduler"] = (
                f"same ({_stages(scope['a_stages'])})" if scope["kind"] == "same" else
                f"DIFFERENT: {_stages(scope['a_stages'])} / {_stages(scope['b_stages'])}" if scope["kind"] ==
                "different" else "against the CPU-only decode")
        prs.append(row)
    parts.append("<h3>Pairs</h3>" + table(prs))
    if d["sensitivity"]:
        srows = [{"parameter": s["parameter"], "share of the variance": f"{s['share']:.2f}",
                  "log-ratio spread now": f"{s.get('spread_before', float('nan')):.2f}",
                  "once known": f"{s.get('spread_after', float('nan')):.2f}",
                  "P(settled) once known": f"{s.get('p_settled_after', float('nan')):.2f}"}
                 for s in d["sensitivity"][:10]]
        parts.append("<h3>What the decision rests on</h3>" + table(srows))
    if d["next_measurements"]:
        parts.append("<h3>Next measurements on the device</h3>")
        for m in d["next_measurements"]:
            parts.append(f"<p><b>{html.escape(m['parameter'])}</b>: spread {m.get('spread_before', float('nan')):.2f}"
                         f" -> {m.get('spread_after', float('nan')):.2f} in log ratio</p>")
            parts.append(_pre(m["command"]))
            if m.get("then"):
                parts.append(f'<p class="note">then: {html.escape(m["then"])}</p>')
    cal = d.get("calibration")
    if cal:
        parts.append(calibration_html(cal))
    profs = d.get("cpu_profiles") or {}
    if profs:
        parts.append("<h3>CPU profiles</h3>" + table([{"graph": k, "profile": "cached" if v.get("cached") else
                                                       "measured now", "file": v.get("file", "")}
                                                      for k, v in profs.items()]))
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in d.get("notes") or []]
    return "\n".join(parts)


def calibration_html(cal: Mapping) -> str:
    """What the measured totals said: reproduced, identified, left at the prior, flagged."""
    parts = ["<h3>Calibrated on the device's totals</h3>"]
    rep = [{"configuration": k, "measured ms": _ms(r["measured"]), "reproduced p10": _ms(r["p10"]),
            "p50": _ms(r["p50"]), "p90": _ms(r["p90"])} for k, r in (cal.get("reproduced") or {}).items()]
    parts.append(table(rep))
    ident, prior = cal.get("identified") or [], cal.get("prior_only") or []
    flagged = cal.get("flagged") or {}
    flagged_text = ", ".join(f"{k} ({'/'.join(v)})" for k, v in flagged.items()) or "none"
    parts.append(f"<p>identified by the totals: <b>{html.escape(', '.join(ident) or 'none')}</b>; flagged (moved "
                 f"where they cannot be taken at face value: neither identified nor at their prior): "
                 f"<b>{html.escape(flagged_text)}</b>; left at their prior (the totals cannot tell them apart): "
                 f"{html.escape(', '.join(prior) or 'none')}</p>")
    prm = [{"parameter": p["parameter"], "verdict": p.get("status", p["verdict"]), "prior low": f"{p['low']:.4g}",
            "prior high": f"{p['high']:.4g}", "posterior p10": f"{p['p10']:.4g}", "p50": f"{p['p50']:.4g}",
            "p90": f"{p['p90']:.4g}", "spread x": f"{p['shrink']:.2f}"} for p in cal.get("parameters") or []]
    if prm:
        parts.append(table(prm))
    flags = cal.get("flags") or []
    if flags:
        parts += [f'<p class="flag">flag ({html.escape(str(f.get("kind") or "flag"))}): '
                  f'{html.escape(f["message"])}</p>' for f in flags]
    else:
        parts.append('<p class="note">no parameter was pushed outside its plausible range</p>')
    return "\n".join(parts)


__all__ = ["calibration_html", "check_whatif", "decision_sentence", "read_whatif", "whatif_html"]
