"""Draws of the uncertain parameters: one seeded matrix shared by every configuration a question compares.

Rates, bandwidths and fixed costs are positive and act multiplicatively, so each uncertain parameter is drawn
log-uniformly over its [low, high]; a parameter without a range keeps its value in every draw. Configurations
evaluated on the same `Draws` are paired: draw i is one possible device for all of them, so "A is faster than
B" is counted draw by draw, not from two independent spreads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kzlab.analysis.predict.parameters import Parameter
from kzlab.errors import InvalidInputError, InvalidOptionError

DEFAULT_DRAWS = 500
MAX_DRAWS = 1_000_000


def check_draws(n: Any, seed: Any) -> tuple[int, int]:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_DRAWS:
        raise InvalidOptionError(f"draws={n!r}: expected an integer from 1 to {MAX_DRAWS}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidOptionError(f"seed={seed!r}: expected an integer >= 0")
    return n, seed


@dataclass
class ParameterSpace:
    """The parameters of one or more predictions by name; the uncertain ones are the draws' columns."""

    params: dict[str, Parameter] = field(default_factory=dict)

    def add(self, params: list[Parameter], where: str = "") -> None:
        for p in params:
            old = self.params.get(p.name)
            if old is None:
                self.params[p.name] = p
            elif (old.value, old.low, old.high) != (p.value, p.low, p.high):
                raise InvalidInputError(
                    f"parameter {p.name} has two ranges ({old.value:g} [{old.low}, {old.high}] and {p.value:g} "
                    f"[{p.low}, {p.high}]{' in ' + where if where else ''}): paired draws need one range per name; "
                    "give the backends of different profiles different names, or one [perf] table"
                )

    @classmethod
    def shared_by(cls, predictions: dict[str, Any]) -> ParameterSpace:
        """The parameters the cost models of these predictions (name -> Prediction) read, under one name each, so
        that they can be priced on the same draws (refused when a name has two ranges)."""
        space = cls()
        for k, p in predictions.items():
            used = p.costs.parameter_names()
            space.add([q for q in p.parameters if q.name in used], where=k)
        return space

    @property
    def names(self) -> list[str]:
        """Every parameter, sorted (the order of a draw's columns: stable for a seed)."""
        return sorted(self.params)

    @property
    def uncertain(self) -> list[str]:
        return [n for n in self.names if self.params[n].uncertain]

    def nominal(self) -> np.ndarray:
        """One draw: every parameter at its stated value."""
        return np.array([[self.params[n].value for n in self.names]], dtype=np.float64)

    def sample(self, n: int, seed: int = 0) -> Draws:
        """`n` seeded draws, log-uniform over each uncertain parameter's range."""
        n, seed = check_draws(n, seed)
        names = self.names
        rng = np.random.default_rng(seed)
        theta = np.empty((n, len(names)), dtype=np.float64)
        for j, name in enumerate(names):
            p = self.params[name]
            if p.uncertain:
                lo, hi = np.log(p.low), np.log(p.high)
                theta[:, j] = np.exp(rng.uniform(lo, hi, n))
            else:
                theta[:, j] = p.value
        return Draws(names, theta, seed, dict(self.params))


@dataclass
class Draws:
    """A matrix of parameter values: one row a draw, one column a parameter (`names`)."""

    names: list[str]
    theta: np.ndarray
    seed: int
    params: dict[str, Parameter]
    #: where the draws come from: "prior" (the stated ranges) or "posterior (...)" after a calibration
    kind: str = "prior"

    def __len__(self) -> int:
        return int(self.theta.shape[0])

    def column(self, name: str) -> np.ndarray:
        return self.theta[:, self.names.index(name)]

    def select(self, rows: np.ndarray, kind: str) -> Draws:
        return Draws(self.names, self.theta[rows], self.seed, self.params, kind)


def spread(x: np.ndarray) -> dict[str, float]:
    """p10, p50, p90, min, max and the number of draws of a sample (the JSON `range` contract)."""
    x = np.asarray(x, dtype=np.float64)
    p10, p50, p90 = np.percentile(x, [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90), "min": float(x.min()), "max": float(x.max()),
            "draws": int(x.size)}
