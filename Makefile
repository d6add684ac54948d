# The README's two commands. Set-up lives inside them and is idempotent:
# the venv is created once and re-installed only when pyproject.toml changes.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup lint test test-unit serve loadtest faults clean

# The browser the web console's test drives (tests/integration/test_console.py): Debian's Chromium,
# installed only when missing (needs root and apt access; the Python driver is in the `dev` extras).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get install -y --no-install-recommends chromium || \
	  (apt-get update && apt-get install -y --no-install-recommends chromium)

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,load]'
	touch $(STAMP)

setup: $(STAMP)

# ruff (style and errors) and import-linter (the layer rules in pyproject.toml), then every test.
lint: $(STAMP)
	$(BIN)/ruff check hygraph tests loadtests k8s
	$(BIN)/lint-imports

test: lint $(CHROMIUM)
	$(BIN)/pytest tests --durations=30

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

# Serves runs/demo on 127.0.0.1:8000 (`make serve PORT=8001` for another port), building the
# bundled demo index there first if needed.
PORT ?= 8000
serve: $(STAMP)
	$(BIN)/hygraph serve --index-dir runs/demo --port $(PORT)

# Scenarios b (queries with inserts and deletes) and z (Zipf-repeated questions: the answer cache) of loadtests/,
# 60 s each, against a fresh `hygraph serve` (the demo index is built first).
loadtest: $(STAMP)
	$(BIN)/python loadtests/loadtest.py --scenario b,z --seconds 60 --out runs/loadtest/report

# The three fault injections of loadtests/faults.py on a fresh local stack.
faults: $(STAMP)
	$(BIN)/python loadtests/faults.py --fault all --out runs/faults/report

clean:
	rm -rf $(VENV) .pytest_cache
