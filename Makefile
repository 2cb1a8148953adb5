# qverify: `make demo` sets everything up and runs a real verification; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
QV := $(VENV)/bin/qverify
STAMP := $(VENV)/.setup-done
ACAS := benchmarks/acasxu

.PHONY: setup bytecode setup-framac demo test test-slow verify lint clean

# make verify: the default suites at 16 bit with qverify's own defaults (back end, intervals, the
# suite file's timeout): the same run as `qverify suite run NAME --format 16`. Override any of these,
# e.g. make verify SUITE=acasxu FORMAT=16.16 TIMEOUT=116 INTERVALS=framac
SUITE ?= iris vocalic digits
FORMAT ?= 16
JOBS ?= 2
RESULTS ?= results
TIMEOUT ?=
INTERVALS ?=
VERIFY_FLAGS ?=

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	PYTHON=$(PYTHON) VENV=$(VENV) ./scripts/setup.sh
	$(PY) -m compileall -q qverify >/dev/null
	touch $(STAMP)

# the optional extra: Frama-C EVA (apt's frama-c-base, ~290 MB) for `--intervals framac`; the default
# (`auto`) never runs it (docs/invariants.md, "The auto rule")
setup-framac: setup
	FRAMAC=1 PYTHON=$(PYTHON) VENV=$(VENV) ./scripts/setup.sh

# qverify's bytecode, written once: a `qverify` process reads it even where PYTHONDONTWRITEBYTECODE
# is set, which otherwise compiles every module again in every process (measured on an iris box:
# 0.75-0.98 s of CPU per `qverify verify` without it, 0.49-0.53 s with it); only changed files are
# compiled again
bytecode: setup
	@$(PY) -m compileall -q qverify >/dev/null

demo: bytecode
	QV=$(QV) ./scripts/demo.sh

# every core (pytest-xdist); the tests compiled first too, as the package (`bytecode`), for the
# tests' hundreds of `qverify` processes.
# First the tools this machine has, onnxruntime's int8 kernel first (the bit-exactness tests compare
# with it: int8 with AVX-VNNI, int8-x86 on AVX2 alone), so that a log says what was exercised; at
# the end the skipped tests' reasons (-rs) and the slowest (--durations).
test: bytecode
	$(PY) -m compileall -q tests >/dev/null
	@echo "make test: the tools found here (a test that needs a missing one skips, saying why):"
	@$(QV) info --tools
	@echo "make test: the fast tests, ~10 min on 2 idle cores (more on a busy machine); a dot per test passed, each line ending with the share done"
	$(PY) -m pytest -q -n auto -rs --durations=15

verify: bytecode
	@$(if $(RESUME),echo "make verify: continuing the runs in $(RESULTS)/ (RESUME=1)",echo "make verify: replacing any previous run in $(RESULTS)/<suite> (--overwrite; RESUME=1 continues one instead)")
	@for suite in $(SUITE); do \
	  $(QV) suite run $$suite $(foreach f,$(FORMAT),--format $(f)) --jobs $(JOBS) \
	    $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(INTERVALS),--intervals $(INTERVALS)) \
	    --out $(RESULTS)/$$suite $(if $(RESUME),--resume,--overwrite) $(VERIFY_FLAGS) || exit $$?; \
	done
	@echo "summaries: $(foreach s,$(SUITE),$(RESULTS)/$(s)/summary.md)"

test-slow: bytecode
	$(PY) -m compileall -q tests >/dev/null
	@$(QV) info --tools | head -1
	$(PY) -m pytest -q -n auto -rs --durations=15 -m slow

lint: setup
	$(PY) -m ruff check qverify tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
