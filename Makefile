# kzlab: `make test` and `make demo` work on a fresh machine (Python 3.11, gcc, cmake).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# ggml-python is built from source: RPC always, OpenBLAS when pkg-config finds it
BLAS   := $(shell pkg-config --exists openblas 2>/dev/null && echo "-DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS")
GGML_CMAKE_ARGS := -DGGML_RPC=ON -DGGML_NATIVE=ON $(BLAS)
STAMP  := $(VENV)/.ggml-$(shell echo "$(GGML_CMAKE_ARGS)" | md5sum | cut -c1-8)

.PHONY: venv test demo lint fuzz bench notebooks wheel-check clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# the ggml-python wheel is built once per CMAKE_ARGS and kept in $(VENV)/wheels, so that the wheel check's fresh
# venv installs the same build instead of compiling it again
$(STAMP): $(PY)
	rm -rf $(VENV)/wheels
	CMAKE_ARGS="$(GGML_CMAKE_ARGS)" $(PIP) wheel -q --no-cache-dir --no-binary ggml-python --no-deps -w $(VENV)/wheels ggml-python==0.0.45
	$(PIP) install -q --force-reinstall --no-deps $(VENV)/wheels/ggml_python-*.whl
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
	KZLAB_FUZZ_CASES=10000 $(PY) -m pytest -q tests/test_fuzz.py
	KZLAB_INFER_SCHEMES=2000 $(PY) -m pytest -q -s tests/test_infer_fuzz.py

bench: venv
	$(PIP) install -q -e ".[bench]"
	$(PY) benchmarks/decode.py

notebooks: venv
	$(PY) -m pytest -q tests/test_notebooks.py

# kzlab as a user gets it: the wheel in a fresh venv, run outside the checkout (see .ci/wheel-check)
wheel-check: venv
	PYTHON=$(PYTHON) GGML_WHEELS=$(VENV)/wheels bash .ci/wheel-check

clean:
	rm -rf $(VENV) build *.egg-info
