"""The devices this ggml build registered, by kzlab's backend names (read from ggml's registry, never assumed)."""

from __future__ import annotations

from typing import Any

from ggml import ggml as g


def registered_devices() -> list[dict[str, Any]]:
    """Every device of this ggml build: name, description, type (cpu / gpu / accel)."""
    kinds = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}
    out = []
    for i in range(g.ggml_backend_dev_count()):
        d = g.ggml_backend_dev_get(i)
        out.append(
            {
                "name": g.ggml_backend_dev_name(d).decode(),
                "description": g.ggml_backend_dev_description(d).decode(),
                "type": kinds.get(int(g.ggml_backend_dev_type(d)), str(g.ggml_backend_dev_type(d))),
            }
        )
    return out


def available_backends() -> list[str]:
    """Backend names usable here (rpc needs an address and is listed as `rpc://HOST:PORT`)."""
    names = []
    for d in registered_devices():
        n = d["name"].lower()
        if n == "cpu":
            names.append("cpu")
        elif n == "blas":
            names.append("blas")
        elif not n.startswith("rpc"):
            names.append(n)
    if hasattr(g, "ggml_backend_rpc_init") and getattr(g, "GGML_USE_RPC", True):
        names.append("rpc://HOST:PORT")
    return names
