"""How channels and time length evolve through the decoder's stages, as plain data (from layer records)."""

from __future__ import annotations

from kzlab.graph.builder import LayerRecord


def evolution(layers: list[LayerRecord], prefix: str = "") -> list[dict]:
    """One row per stage: the channels and T entering it (first layer) and leaving it (last sized layer).

    `prefix` keeps only stages whose name starts with it (e.g. "decoder." for the BigVGAN part).
    """
    rows: dict[str, dict] = {}
    for rec in layers:
        if prefix and not rec.stage.startswith(prefix):
            continue
        if not (rec.c_out or rec.t_out):
            continue
        r = rows.get(rec.stage)
        if r is None:
            rows[rec.stage] = {
                "stage": rec.stage,
                "c_in": rec.c_in,
                "t_in": rec.t_in,
                "c_out": rec.c_out,
                "t_out": rec.t_out,
            }
        else:
            r["c_out"], r["t_out"] = rec.c_out, rec.t_out
    return list(rows.values())


def channel_path(rows: list[dict]) -> list[int]:
    """Channels along the stages: the first input, then every change of stage output."""
    out = [rows[0]["c_in"]] if rows else []
    for r in rows:
        if r["c_out"] != out[-1]:
            out.append(r["c_out"])
    return out


def time_path(rows: list[dict]) -> list[int]:
    """T along the stages: the first input, then every change of stage output length."""
    out = [rows[0]["t_in"]] if rows else []
    for r in rows:
        if r["t_out"] != out[-1]:
            out.append(r["t_out"])
    return out
