# ooc-svm: `make demo` runs the whole job end to end, `make test` runs the test suite.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
DEMO    ?= demo
PYTEST_ARGS ?= --durations=25

.PHONY: venv demo test test-slow test-cluster test-all lint lint-ruff lint-format lint-types lint-imports check clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]" -c constraints.txt
	touch $@

venv: $(BIN)/.installed

# generate data -> ingest -> train -> evaluate, all on built-in synthetic data
demo: venv
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(BIN)/ooc-svm synth $(DEMO)/train.svm --rows 200000 --features 20000 --nnz-per-row 40 --seed 1
	$(BIN)/ooc-svm synth $(DEMO)/test.svm --rows 50000 --features 20000 --nnz-per-row 40 --seed 1 --split test
	$(BIN)/ooc-svm ingest $(DEMO)/train.svm $(DEMO)/train.zarr
	$(BIN)/ooc-svm ingest $(DEMO)/test.svm $(DEMO)/test.zarr
	$(BIN)/ooc-svm info $(DEMO)/train.zarr
	$(BIN)/ooc-svm train --solver perf $(DEMO)/train.zarr -o $(DEMO)/model --C 1
	$(BIN)/ooc-svm evaluate $(DEMO)/model $(DEMO)/test.zarr

# the CI test command (slow tests excluded; pytest's "no tests collected" exit 5 is not a failure)
test: venv
	$(BIN)/python -m pytest -m "not slow" -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

# the slow tests alone (solver comparisons on real data, the README's blocks as written, the wheel)
test-slow: venv
	$(BIN)/python -m pytest -m slow -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

# the tests that start a real Dask cluster (distributed.LocalCluster or dask scheduler/worker)
test-cluster: venv
	$(BIN)/python -m pytest -m cluster -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

test-all: venv
	$(BIN)/python -m pytest -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

# the CI checks before the tests: lint, format, types, layer contracts (pyproject.toml has
# their settings); `make -k lint` runs all four and reports every failure
LINT_PATHS := ooc_svm tests scripts
lint: lint-ruff lint-format lint-types lint-imports

lint-ruff: venv
	$(BIN)/ruff check $(LINT_PATHS)

lint-format: venv
	$(BIN)/ruff format --check $(LINT_PATHS)

lint-types: venv
	$(BIN)/mypy ooc_svm

lint-imports: venv
	$(BIN)/lint-imports

# what .ci/run runs: every check, then the tests
check: lint test

clean:
	rm -rf $(DEMO) build *.egg-info .pytest_cache .mypy_cache .import_linter_cache
