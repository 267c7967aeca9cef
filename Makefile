# The two commands a newcomer needs: `make run` and `make test`. Both start with `make setup`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.clawgate-setup

.PHONY: setup run test browser lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "clawgate needs Python 3.11 or newer")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[test]'
	@touch $(STAMP)

run: setup
	$(VENV)/bin/clawgate run

# Headless Chromium for the browser test (Debian package; Playwright's own download needs the internet).
browser:
	@command -v chromium >/dev/null 2>&1 || sh scripts/install-chromium.sh

test: setup browser
	$(VENV)/bin/ruff check gateway channels memory tests benchmarks
	$(VENV)/bin/mypy gateway memory channels
	$(PY) -m pytest -n auto --durations=25

lint: setup
	$(VENV)/bin/ruff check gateway channels memory tests benchmarks
	$(VENV)/bin/mypy gateway memory channels

bench: setup
	$(PY) benchmarks/turn_overhead.py
	$(PY) benchmarks/session_budget.py
	$(PY) benchmarks/memory_store.py
	$(PY) benchmarks/recall_scale.py --quick

clean:
	rm -rf $(VENV) .pytest_cache
