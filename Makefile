# Two commands, each doing its own setup on a fresh machine:
#   make demo   synthesise -> pack -> verify -> inspect -> torchrun x2 training -> report
#   make test   the test suite
#   make wheel-check   the built wheel, installed outside the repo, packs and trains (CI runs it)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: demo test wheel-check install clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test,lightning,fast,radar,s3]' -c constraints.txt
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) tools/demo.py --out runs/demo

test: $(VENV)/.installed
	$(PY) -m pytest -q

wheel-check: $(VENV)/.installed
	PY=$(abspath $(PY)) bash tools/check_wheel.sh

clean:
	rm -rf runs/demo .pytest_cache
