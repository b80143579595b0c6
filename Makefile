# labkit: common tasks. `make help` lists them.
# Variables: VENV (default .venv, or $LABKIT_VENV), ARGS (extra arguments for labkit/jupyter).

VENV ?= $(or $(LABKIT_VENV),.venv)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.labkit-setup-done
ARGS ?=
# pytest workers (pytest-xdist): one per core by default; JOBS=0 runs in this process
JOBS ?= auto

.DEFAULT_GOAL := help
.PHONY: help setup test lint test-package test-notebooks run lab images slides bench clean-notebooks check

help:
	@echo "make setup            create $(VENV) and install labkit with its dependencies"
	@echo "make run              set up, then run the notebook suite (labkit run; ARGS=... adds options)"
	@echo "make test             set up, then ruff + mypy, pytest tests/ and every notebook with nbval (CI;"
	@echo "                     each solution with its learner copy; worked exercises checked strictly)"
	@echo "make lab              start JupyterLab on notebooks/ (ARGS=\"--port 9000 --no-browser\";"
	@echo "                     other jupyter lab options, --Name.option=value, are passed on)"
	@echo "make slides           export workshop slides (labkit slides)"
	@echo "make images           export the charts as PNG (labkit images; needs Chromium)"
	@echo "make bench            run the benchmarks (labkit bench)"
	@echo "make clean-notebooks  strip outputs, execution counts and widget state from notebooks/"
	@echo "make check            quick checks: byte-compile, packaging and clean-notebook tests"

# The stamp is written by scripts/setup.sh on success; it is redone when the dependency list
# or the script change. `make setup` always re-runs the (idempotent) script.
$(STAMP): pyproject.toml scripts/setup.sh
	LABKIT_VENV=$(VENV) bash scripts/setup.sh

setup:
	LABKIT_VENV=$(VENV) bash scripts/setup.sh

# The CI test command (README, .ci/run): lint and types, the package tests, then every notebook
# on this machine.
test: lint test-package test-notebooks

# ruff's rules and mypy's strict modules are in pyproject.toml
lint: $(STAMP)
	$(PY) -m ruff check labkit tests
	$(PY) -m mypy labkit

# One CPU thread per worker (torch's own default is one per core in every worker: with as many
# workers as cores they spin against each other: 817 s against 617 s on a 2-core machine)
test-package: $(STAMP)
	LABKIT_CPU_THREADS=$${LABKIT_CPU_THREADS:-1} OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} \
		$(PY) -m pytest -q -n $(JOBS) tests

# nbval executes every cell of every notebook. A student notebook and its worked solution differ
# only in their exercise cells, so one kernel runs both (scripts/ci_notebooks.py): each solution
# notebook, with the learner's open copy of each exercise run leniently (its checks print TODO)
# just before the worked answer, which is checked strictly (LABKIT_STRICT_EXERCISES=1, see
# labkit/teach/exercises.py): a wrong or unanswered worked exercise fails. The workshop syllabi
# run as they are. The variable is set in the pytest process, whose environment the notebook
# kernels inherit. Workers take whole notebooks (--dist loadfile): a notebook's cells share one
# kernel.
CI_NOTEBOOKS = build/ci-notebooks
NBVAL = LABKIT_CPU_THREADS=$${LABKIT_CPU_THREADS:-1} $(PY) -m pytest -q -n $(JOBS) --dist loadfile \
	--nbval-lax --nbval-current-env

test-notebooks: $(STAMP)
	$(PY) scripts/ci_notebooks.py $(CI_NOTEBOOKS)
	LABKIT_STRICT_EXERCISES=1 $(NBVAL) $(CI_NOTEBOOKS)/

run: $(STAMP)
	$(VENV)/bin/labkit run $(ARGS)

lab: $(STAMP)
	$(VENV)/bin/labkit lab $(ARGS)

images: $(STAMP)
	$(VENV)/bin/labkit images $(ARGS)

slides: $(STAMP)
	$(VENV)/bin/labkit slides $(ARGS)

bench: $(STAMP)
	$(VENV)/bin/labkit bench $(ARGS)

# Strips what executing a notebook adds: outputs, execution counts, widget state and
# papermill/nbclient bookkeeping, language_info details. Tags, slideshow metadata and the
# kernelspec are kept.
define STRIP_NOTEBOOKS_PY
import sys, nbformat
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    for key in ("widgets", "papermill"):
        nb.metadata.pop(key, None)
    if "language_info" in nb.metadata:  # keep the name, drop the executing Python's details
        nb.metadata.language_info = {"name": nb.metadata.language_info.get("name", "python")}
    for cell in nb.cells:
        for key in ("papermill", "execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    if nbformat.writes(nb) != before:
        nbformat.write(nb, path)
        print("cleaned", path)
endef
export STRIP_NOTEBOOKS_PY

clean-notebooks: $(STAMP)
	@nbs="$$(find notebooks -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort)"; \
	if [ -z "$$nbs" ]; then echo "no notebooks"; exit 0; fi; \
	$(PY) -c "$$STRIP_NOTEBOOKS_PY" $$nbs

check: $(STAMP)
	$(PY) -m compileall -q labkit
	$(PY) -m pytest -q tests/test_packaging.py tests/test_notebooks_clean.py
