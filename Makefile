# qverify: `make demo` sets everything up and runs a real verification; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
QV := $(VENV)/bin/qverify
STAMP := $(VENV)/.setup-done
ACAS := benchmarks/acasxu

.PHONY: setup demo test test-slow lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	PYTHON=$(PYTHON) VENV=$(VENV) ./scripts/setup.sh
	touch $(STAMP)

demo: setup
	QV=$(QV) ./scripts/demo.sh

test: setup
	$(PY) -m pytest -q

test-slow: setup
	$(PY) -m pytest -q -m slow

lint: setup
	$(PY) -m ruff check qverify tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
