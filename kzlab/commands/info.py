"""`kzlab info MODEL [--json]`: layout, architecture, hyperparameters, parameter count, dtypes, size, and what
would run it here (the ggml build's backends and the BLAS library its BLAS backend calls)."""

from __future__ import annotations

import json

from kzlab.commands.common import add_model, open_model


def register(sub) -> None:
    p = sub.add_parser("info", help="describe a decoder file")
    add_model(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.arch import arch_of

    m = open_model(args)
    info = {**m.info(), "runtime": runtime_info()}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    arch = arch_of(m.hparams)
    print(f"family      {arch.name} ({arch.label})")
    print(f"file        {info['path']} ({info['file_size'] / 1e6:.1f} MB, {info['kind']})")
    print(f"layout      {info['layout']}   architecture {info['architecture']}")
    print(f"parameters  {info['n_params']:,} in {info['n_tensors']} tensors")
    print(
        "dtypes      "
        + ", ".join(f"{k}: {v} ({info['dtype_bytes'][k] / 1e6:.1f} MB)" for k, v in info["dtypes"].items())
    )
    for label, text in arch.describe(m.hparams):
        print(f"{label:<11} {text}")
    for n in info["notes"]:
        print(f"note        {n}")
    rt = info["runtime"]
    blas = rt["blas"]["label"] if rt["blas"] else "none (ggml's own CPU products)"
    print(f"runtime     ggml {rt['ggml']}, backends {', '.join(rt['backends'])}; BLAS backend: {blas}; "
          f"ggml-cpu libm: {rt['libm']}")
    return 0


def runtime_info() -> dict:
    """The ggml build this process runs: its version, its backends, the BLAS library behind its BLAS backend, and
    whether its CPU backend's libm calls are vectorised (libmvec) or scalar."""
    from kzlab.environment import ggml_blas_library, ggml_cpu_libm, versions
    from kzlab.runtime.devices import available_backends

    lib = ggml_blas_library()
    return {"ggml": versions()["ggml"], "backends": list(available_backends()),
            "blas": lib.as_dict() if lib is not None else None, "libm": ggml_cpu_libm()}
