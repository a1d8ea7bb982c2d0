"""OpenMP's wait policy for ggml's threads: set before ggml loads, by the BLAS's threading, and never over the
user's own setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kzlab import openmp

PROBE = ("import json, os, kzlab; print(json.dumps({k: os.environ.get(k) for k in "
         "('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}))")


def run_probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_policy_follows_the_blas_threading():
    assert openmp.wait_policy(True) == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": str(openmp.SPIN_ROUNDS)}
    assert openmp.wait_policy(False) == {"OMP_WAIT_POLICY": "PASSIVE"}
    got = run_probe()
    assert got == {"GOMP_SPINCOUNT": None, **openmp.wait_policy(openmp.blas_threads_are_gomp())}


@pytest.mark.parametrize("env", [{"OMP_WAIT_POLICY": "PASSIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"},
                                 {"GOMP_SPINCOUNT": "123"}])
def test_a_value_the_user_set_wins(env):
    got = run_probe(**env)
    assert {k: got[k] for k in env} == env
    assert {k: v for k, v in got.items() if k not in env} == dict.fromkeys(set(got) - set(env))
