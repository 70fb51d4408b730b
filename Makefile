# The two commands a newcomer needs: `make demo` and `make test`. Everything else is fetched by scripts/setup.sh.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup system-packages test-setup demo docs screenshots test test-fast fuzz lint ui bench concurrency chaos soak clean-home lock audit

setup:
	@bash scripts/setup.sh

# What only the tests need from the system (Chromium for the browser tests, PostgreSQL's server): Debian's
# packages, installed once when missing, each with one line saying why. The demo never installs them.
system-packages:
	@bash scripts/system-packages.sh chromium postgresql

demo:
	@bash scripts/setup.sh --without-class-archive
	@bash scripts/demo.sh

# The documentation site (MkDocs with the Material theme) into site/: strict, so a broken link or a page missing
# from the nav fails; the reference pages generated from the code are checked first (`python -m cli.reference`
# rewrites them). `make test` builds it too.
docs: setup
	$(BIN)/python -m cli.reference --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The Dagster UI's screenshots the docs show (docs/images/), taken by the UI tests in a real browser.
screenshots: setup system-packages
	LAKEHOUSE_DOCS_IMAGES=$(CURDIR)/docs/images $(BIN)/python -m pytest -p no:xdist -q tests/test_ui.py

# The set-up and the system packages side by side: one fetches the Python stack and the jars and builds the
# class archive (mostly CPU), the other downloads and unpacks Debian's packages (network and disk).
test-setup:
	@$(MAKE) --no-print-directory -j2 setup system-packages

# Two worker processes (one SparkSession each), tests handed out one by one (a module sharing a fixture
# stays on one worker, `xdist_group`): most tests wait on JVM start-up, subprocesses, sensors and a
# browser, so two share the two cores well.
test: test-setup
	$(BIN)/ruff check .
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir .cache/site-check
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=0 --durations-min=15

# The edit loop: the unit tier (no JVM) and the Spark tests of a few seconds (`quick`), under 3 minutes on 2 cores.
# `make test` still runs every tier.
test-fast: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "unit or quick" --durations=5

# The long differential run of the event rules (tens of thousands of generated lines against the plain-Python
# reference) and the hostile files at full size (a million empty lines). Prints how many lines it checked.
fuzz: setup
	LAKEHOUSE_FUZZ_EXAMPLES=$${LAKEHOUSE_FUZZ_EXAMPLES:-1000} LAKEHOUSE_FUZZ_EMPTY_LINES=1000000 \
		$(BIN)/python -m pytest -p no:xdist --timeout 7200 -s -q tests/test_fuzz_events.py tests/test_hostile_lines.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

ui: setup
	@bash scripts/ui.sh

# About three hours on 2 cores; each part also runs alone (see docs/guides/testing.md). Figures: bench/results/.
bench: setup
	$(BIN)/uv pip install --quiet --python $(BIN)/python 'matplotlib==3.10.7' -c requirements.lock
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.history
	$(BIN)/python -m bench.freshness
	$(BIN)/python -m bench.reconcile
	$(BIN)/python -m bench.files
	$(BIN)/python -m bench.kafka
	$(BIN)/python -m bench.cluster
	$(BIN)/python -m bench.report

# Issue 26's chaos: 24 SIGKILLs of every writer in turn over 310,000 events from files and Kafka, then the checks.
chaos: setup
	$(BIN)/python -m bench.chaos

# Issue 26's soak: `run --continuous` at 1,000 events/s for 100 minutes; memory, state, files and batch seconds flat in the last 40.
soak: setup
	$(BIN)/uv pip install --quiet --python $(BIN)/python 'matplotlib==3.10.7' -c requirements.lock
	$(BIN)/python -m bench.soak

# Issue 26's concurrent writers beside `run --continuous` for 10 minutes, checked against the reference.
concurrency: setup
	$(BIN)/python -m bench.concurrency

# The locked set: what a set-up venv holds, pinned (scripts/setup.sh installs with it as constraints).
lock: setup
	@{ echo "# The locked set: every package a \`make setup\` venv holds (with the dev and bench extras), pinned."; \
	  echo "# scripts/setup.sh installs with it as constraints; \`make lock\` rewrites it, \`make audit\` audits it."; \
	  $(BIN)/pip list --format=freeze --exclude-editable --disable-pip-version-check \
	    | grep -v '^lakehouse==\|^pip==\|^setuptools==\|^wheel==\|^uv=='; } > requirements.lock

# Known vulnerabilities in the locked set: pip-audit (in a venv of its own) against PyPI's advisories, or
# offline against a checkout of an OSV advisory database: make audit ADVISORIES=path/to/advisory-database
audit: setup
	$(BIN)/python -m devtools.audit $(if $(ADVISORIES),--advisories $(ADVISORIES))

clean-home:
	rm -rf .lakehouse
