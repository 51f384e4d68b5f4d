# `make serve` and `make test` are the two set-up commands; each installs what it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTRITON := nvidia-pytriton==0.7.0

.PHONY: install install-dev serve test lint clean

$(PY):
	python3 -m venv $(VENV)

$(VENV)/.installed: requirements.txt | $(PY)
	$(PIP) install -r requirements.txt
	# Only the tritonserver binary and Python backend are used from this wheel; its
	# own Python dependencies (numpy<2 pins, pytriton client libraries) are not needed.
	$(PIP) install --no-deps $(PYTRITON)
	touch $@

$(VENV)/.installed-dev: requirements-dev.txt $(VENV)/.installed
	$(PIP) install -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

serve: install
	$(PY) -m embed_server serve

test: install-dev
	# The dashboard test drives Debian's headless Chromium (needs root to install).
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update && apt-get install -y chromium chromium-driver)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf build .pytest_cache test-artifacts
