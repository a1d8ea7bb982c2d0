# kzlab: `make test` and `make demo` work on a fresh machine (Python 3.11, gcc, cmake).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# ggml-python is built from source (.ci/build-ggml): RPC always, and for ggml's BLAS backend the BLAS chosen by
# measurement (README, "Which BLAS"): KZLAB_BLAS=auto takes Intel oneMKL from PyPI on x86-64, else the system's
# OpenBLAS, else none; KZLAB_BLAS=mkl|openblas|none asks for one (and fails when it cannot be had)
KZLAB_BLAS  ?= auto
MKL_VERSION ?= 2026.2.1
STAMP  := $(VENV)/.ggml-$(shell echo "$(KZLAB_BLAS) $(MKL_VERSION) rpc native libmvec" | md5sum | cut -c1-8)

.PHONY: venv test demo lint fuzz bench notebooks wheel-check clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# the ggml-python wheel is built once per BLAS choice and kept in $(VENV)/wheels (with what it needs at run time),
# so that the wheel check's fresh venv installs the same build instead of compiling it again
$(STAMP): $(PY)
	bash .ci/build-ggml $(VENV) $(KZLAB_BLAS) $(MKL_VERSION)
	rm -f $(VENV)/.ggml-*
	touch $(STAMP)

venv: $(STAMP)
	$(PIP) install -q -e ".[test,notebook]" ruff

test: venv
	$(PY) -m pytest -q tests

demo: venv
	$(VENV)/bin/kzlab demo

lint: venv
	$(VENV)/bin/ruff check kzlab tests benchmarks

fuzz: venv
	KZLAB_FUZZ_CASES=10000 $(PY) -m pytest -q tests/test_fuzz.py tests/test_fuzz_packed.py
	KZLAB_INFER_SCHEMES=2000 $(PY) -m pytest -q -s tests/test_infer_fuzz.py

bench: venv
	$(PIP) install -q -e ".[bench]"
	$(PY) benchmarks/decode.py

# the notebooks as shipped (`make test` runs them at the suite's smaller size: tests/test_notebooks.py)
notebooks: venv
	KZLAB_NOTEBOOK_SIZE=full $(PY) -m pytest -q tests/test_notebooks.py

# kzlab as a user gets it: the wheel in a fresh venv, run outside the checkout (see .ci/wheel-check)
wheel-check: venv
	PYTHON=$(PYTHON) GGML_WHEELS=$(VENV)/wheels bash .ci/wheel-check

clean:
	rm -rf $(VENV) build *.egg-info
