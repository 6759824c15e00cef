# The two commands: `make demo` (a full release on the bundled dataset) and `make test` (the whole suite).
# Both create .venv when missing and install the project with torch pinned to the local CPU wheel.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export DAGSTER_HOME ?= $(CURDIR)/dagster_home
export GX_ANALYTICS_ENABLED ?= false
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR ?= false
export PYTHONUNBUFFERED = 1

.PHONY: install demo test gates test-slow bench dagster-ui mlflow-ui clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "Installing splice with torch (CPU), Dagster, MLflow and scikit-learn into $(VENV): about 4-6 minutes and 3 GB on a fresh clone, once (quiet until done)."
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[all,test]' 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	$(PY) -c "import splice_assets, torch, dagster, mlflow, great_expectations" 
	@echo "Compiling the numba kernels once (about 30 s), so that the first release does not."
	$(PY) -m splice_assets.warmup
	@touch $(STAMP)

install: $(STAMP)

# Progress on stderr, Dagster's log at INFO; make demo DEMO_ARGS=--verbose shows every Dagster event (DEBUG).
demo: install
	$(PY) -m splice_assets.dagster_layer.demo $(DEMO_ARGS)

# Two pytest workers (pytest-xdist), one test file per worker at a time: module fixtures (a Dask cluster, a
# Dagster webserver) start once. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

# Static gates (CI runs them before the tests): lint, types (strict on the privacy-critical modules), and the
# import contract that keeps the model, post-processing and sampling away from private rows.
gates: install
	$(VENV)/bin/ruff check splice_assets tests bench definitions.py
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test-slow: install
	$(PY) -m pytest -q -m slow

# Benchmark vs AIM/MST (docs/benchmarks.md); e.g. make bench BENCH_ARGS="--quick".
bench: install
	$(PY) -m bench.run $(BENCH_ARGS)

dagster-ui: install
	$(VENV)/bin/dg dev

mlflow-ui: install
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(DAGSTER_HOME)/mlflow.db

clean:
	rm -rf $(VENV) out
