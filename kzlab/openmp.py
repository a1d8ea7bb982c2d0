"""OpenMP's wait policy for ggml's threads, set in the environment when kzlab is imported, before ggml loads.

ggml's CPU backend runs each graph (each scheduler split) in an OpenMP parallel region, with an OpenMP barrier
between its nodes, and libgomp reads its wait policy once, when it is loaded. A value the user set wins (either
variable), and nothing here has an effect when ggml was imported before kzlab. The settings are recorded with every
timing (`kzlab.environment.THREAD_ENV`).

- A BLAS with threads of its own (OpenBLAS's pthreads): idle OpenMP threads must sleep (PASSIVE), else they spin on
  the cores the next split's MUL_MAT needs (the default BLAS + CPU decode was about 25 % faster asleep,
  benchmarks/decode.py).
- oneMKL's GNU threading layer (what `make` installs on x86-64) runs its products on the same libgomp threads, so
  nothing else wants the cores while they wait, and a sleeping barrier costs a futex wake-up per node: about 80 us
  for each small node of a 25-frame kyutai/mimi decode here. A short spin (10000 rounds, then sleep) took that
  decode from 97 to 84 ms (2 threads, AMD EPYC, in turns).
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

#: the rounds an idle libgomp thread spins before it sleeps, where ggml's BLAS runs on libgomp's threads
SPIN_ROUNDS = 10000


def blas_threads_are_gomp() -> bool:
    """Whether ggml's BLAS backend threads through libgomp (oneMKL's GNU threading layer), read from the library's
    file without loading it."""
    try:
        spec = find_spec("ggml")
        roots = list(spec.submodule_search_locations or []) if spec else []
    except (ImportError, ValueError):
        return False
    for root in roots:
        lib = Path(root) / "lib" / "libggml-blas.so"
        try:
            return b"libmkl_gnu_thread" in lib.read_bytes()
        except OSError:
            continue
    return False


def wait_policy(blas_gomp: bool) -> dict[str, str]:
    """The environment kzlab sets for ggml's OpenMP threads."""
    if blas_gomp:
        return {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": str(SPIN_ROUNDS)}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ.update(wait_policy(blas_threads_are_gomp()))
