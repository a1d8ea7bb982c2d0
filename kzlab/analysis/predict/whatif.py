"""Put milliseconds and bytes on a simulated placement: the time model and the memory model, with the
measurements that replace assumptions (a CPU profile, device op logs, a calibrated profile).

`simulate(..., predict=...)` calls `predict_placement` while the graph it simulated is still alive, so the
memory model measures the same graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.analysis.predict import oplog
from kzlab.analysis.predict.draws import DEFAULT_DRAWS, check_draws
from kzlab.analysis.predict.memory import BackendMemory, placement_memory
from kzlab.analysis.predict.parameters import BackendPerf, Parameter, backend_perf, memory_budget
from kzlab.analysis.predict.timing import Prediction, predict
from kzlab.errors import InvalidInputError, InvalidOptionError

#: the keys `predict=` accepts as a dict (the same names as the CLI's options)
OPTION_KEYS = ("cpu_profile", "cpu_scale", "cpu_baseline_ms", "ops", "perf", "draws", "seed", "cpu_baseline_profile",
               "cpu_baseline_spread", "ops_spread")


@dataclass
class PredictOptions:
    """What a prediction is made from. `ops`: device op logs (test-backend-ops perf console/csv/sql, or
    `kzlab bench-ops` output), paths or parsed records. `perf`: [perf] tables by backend name that replace the
    capability profiles' (e.g. from `kzlab calibrate`). `draws`, `seed`: the distribution's draws."""

    cpu_profile: Any = None
    cpu_scale: float | None = None
    cpu_baseline_ms: float | list[float] | None = None
    ops: list[Any] = field(default_factory=list)
    perf: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: how many seeded draws of the uncertain parameters make the predicted distribution
    draws: int = DEFAULT_DRAWS
    seed: int = 0
    #: the profile of the graph the CPU-only baseline was measured on, when it is not this placement's graph
    cpu_baseline_profile: Any = None
    #: the CPU-only baseline's relative run-to-run spread (default: observed over its runs when
    #: `cpu_baseline_ms` is a list of them, else the stated MEASURED_SPREAD)
    cpu_baseline_spread: float | None = None
    #: the measured op rows' relative spread (e.g. bench-ops' `config["spread"]`; default OP_SPREAD)
    ops_spread: float | None = None

    def __post_init__(self) -> None:
        check_draws(self.draws, self.seed)

    @classmethod
    def of(cls, predict: Any) -> PredictOptions | None:
        """None/False: no prediction; True: defaults; a dict of OPTION_KEYS; or a PredictOptions."""
        if predict is None or predict is False:
            return None
        if predict is True:
            return cls()
        if isinstance(predict, PredictOptions):
            return predict
        if isinstance(predict, dict):
            unknown = set(predict) - set(OPTION_KEYS)
            if unknown:
                raise InvalidOptionError(f"predict: unknown option(s) {', '.join(sorted(unknown))}")
            d = dict(predict)
            ops = d.get("ops") or []
            d["ops"] = [ops] if isinstance(ops, str | Path) else list(ops)
            return cls(**d)
        raise InvalidOptionError(f"predict={predict!r}: expected True, a dict of {', '.join(OPTION_KEYS)}, or None")


def _records(ops: Iterable[Any]) -> list[oplog.OpRecord]:
    out: list[oplog.OpRecord] = []
    for item in ops:
        if isinstance(item, oplog.OpRecord):
            out.append(item)
        else:
            out.extend(oplog.read(item))
    return out


def _measured_fn(records: list[oplog.OpRecord], backend: str | None) -> Callable[[Any], Any]:
    """node -> Estimate | None from measured rows: MUL_MAT as test_mul_mat's (type_a, type_b, m, n, k), other ops
    as kzlab bench-ops writes them (type, ne: the output's shape, interpolated in ne[1])."""

    def fn(node: Any) -> Any:
        op = node.op
        src_ne, src_types = list(node.src_ne), [t.lower() for t in node.src_types]
        try:
            if op == "MUL_MAT" and len(src_ne) >= 2:
                a, b = src_ne[0], src_ne[1]
                if a[2] * a[3] != 1 or b[2] * b[3] != 1:
                    return None
                return oplog.match_mul_mat(records, src_types[0], src_types[1], a[1], b[1], a[0], backend=backend)
            params = {"type": src_types[0] if src_types else node.type.lower(), "ne": tuple(int(x) for x in node.ne)}
            return oplog.match(records, op, params, row_param="ne[1]", backend=backend)
        except InvalidOptionError:
            return None

    return fn


def backend_perfs(sim_backends: list[Any], overrides: dict[str, dict[str, Any]]) -> dict[str, BackendPerf]:
    """Each backend's perf model: its capability profile's [perf] table, or the override given for it."""
    out = {}
    for b in sim_backends:
        caps = b.profile
        table = overrides.get(b.name) or overrides.get(b.name.lower()) or getattr(caps, "perf", None)
        where = f"capability profile {caps.name}" + (" (override)" if b.name in overrides else "")
        out[b.name.lower()] = backend_perf(b.name, table, where)
    return out


def predict_placement(
    nodes: list[Any],
    splits: list[Any],
    config: dict[str, Any],
    sim_backends: list[Any],
    gf: Any,
    weight_tensors: dict[str, Any],
    copies: dict[tuple[int, int], int],
    options: PredictOptions,
) -> tuple[Prediction, dict[str, BackendMemory]]:
    """The predicted time and the memory of one placement (`simulate` hands over its graph and result)."""
    perf = backend_perfs(sim_backends, options.perf)
    records = _records(options.ops)
    measured = {}
    device = [b.name for b in sim_backends[:-1]]
    if records:
        logged = sorted({r.backend for r in records})
        for name in device:
            own = [r for r in records if r.backend.lower().startswith(name.lower())]
            if own:
                measured[name.lower()] = _measured_fn(own, None)
            elif len(device) == 1 and len(logged) == 1:  # one device, one measured backend: the device's log
                measured[name.lower()] = _measured_fn(records, None)
        if not measured:
            raise InvalidInputError(
                f"the op logs measured {', '.join(logged)}, none of this placement's device backends "
                f"({', '.join(device)})"
            )
    extra = [Parameter(f"ops.{r}", float(len([x for x in records if x.backend == r])), "rows",
                       f"measured on {r}: {', '.join(sorted({x.file for x in records if x.backend == r}))}")
             for r in sorted({x.backend for x in records})]
    pred = predict(nodes, splits, config, perf, options.cpu_profile, options.cpu_scale, options.cpu_baseline_ms,
                   measured, extra, options.draws, options.seed, options.cpu_baseline_profile,
                   options.cpu_baseline_spread, options.ops_spread)
    names = [b.name for b in sim_backends]
    by_backend_copies: dict[str, int] = {}
    for (_addr, bi), nbytes in copies.items():
        by_backend_copies[names[bi]] = by_backend_copies.get(names[bi], 0) + int(nbytes)
    budgets = {b.name: memory_budget(getattr(b.profile, "memory", None), f"capability profile {b.profile.name}")
               for b in sim_backends}
    mem = placement_memory(gf, weight_tensors, config["weights_on"], [n.backend for n in nodes], names,
                           by_backend_copies, budgets, {b.name: b.buft.id for b in sim_backends})
    return pred, mem
