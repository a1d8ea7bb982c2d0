"""Hyperparameters a file does not carry, given by the user: parsed, typed and checked before any model is built.

Three ways to give them, one meaning: `--hparam NAME=VALUE` on every command that opens a model, `hparams=` in the
API (`kzlab.load`, `kzlab.load_model`), and `[hparams]` in a layout map. Each family says which it accepts and
how to apply them (its files half's `OVERRIDABLE` and `apply_overrides`); a name it does not accept, or a value of
the wrong kind, is refused with the accepted names before anything is built. A value given is recorded as given,
not read, in `Model.notes`, `Model.hparams_given`, `kzlab info` and the reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from kzlab.errors import InvalidOptionError


def parse_items(items: Iterable[str] | None) -> dict[str, Any]:
    """`NAME=VALUE` strings (the CLI's `--hparam`) as a dict: integers and floats as numbers, the rest as text."""
    out: dict[str, Any] = {}
    for item in items or ():
        name, sep, text = str(item).partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name or not text:
            raise InvalidOptionError(f"--hparam {item!r}: expected NAME=VALUE, e.g. group_norm_groups=16")
        if name in out:
            raise InvalidOptionError(f"--hparam {name} is given twice")
        out[name] = _number(text)
    return out


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def coerce(values: Mapping[str, Any], accepted: Mapping[str, type], what: str, source: str = "") -> dict[str, Any]:
    """`values` checked against `accepted` (name -> int or float) for `what` (e.g. "this WavTokenizer decoder"):
    an unknown name, a bool, a non-number, a float where an integer is wanted, or a non-finite value is refused
    (InvalidOptionError) naming the accepted hyperparameters."""
    where = f"{source}: " if source else ""
    names = ", ".join(f"{k} ({t.__name__})" for k, t in accepted.items())
    unknown = sorted(set(values) - set(accepted))
    if unknown:
        raise InvalidOptionError(
            f"{where}hyperparameter(s) {', '.join(unknown)} cannot be given for {what}; accepted: {names}"
        )
    out: dict[str, Any] = {}
    for k, v in values.items():
        want = accepted[k]
        kind = "an integer" if want is int else "a number"
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InvalidOptionError(f"{where}hyperparameter {k}={v!r}: expected {kind}")
        if want is int:
            if isinstance(v, float) and not v.is_integer():
                raise InvalidOptionError(f"{where}hyperparameter {k}={v!r}: expected an integer")
            out[k] = int(v)
        else:
            if not math.isfinite(float(v)):
                raise InvalidOptionError(f"{where}hyperparameter {k}={v!r}: expected a finite number")
            out[k] = float(v)
    return out


def describe(values: Mapping[str, Any]) -> str:
    """`group_norm_groups=16, layer_norm_eps=1e-05` for notes and tables."""
    return ", ".join(f"{k}={v}" for k, v in values.items())
