# Two commands, each doing its own setup on a fresh machine:
#   make demo   synthesise -> pack -> verify -> inspect -> torchrun x2 training -> report
#   make test   the test suite (every tier; make quick: the tier without processes)
#   make wheel-check   the built wheel, installed outside the repo, packs and trains (CI runs it)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Debian's Chromium: the browser test of `carla-wds view` (tests/view/test_view_browser.py)
CHROMIUM ?= /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test quick wheel-check install chromium clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test,lightning,fast,radar,s3,docs]' -c constraints.txt
	touch $@

# Installed only where it is missing (a file target); apt's lists are refreshed only when
# the first try cannot find the package (a fresh machine).
$(CHROMIUM):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium || \
	  { $(SUDO) apt-get update -q && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

chromium: $(CHROMIUM)

install: $(VENV)/.installed $(CHROMIUM)

demo: $(VENV)/.installed
	$(PY) tools/demo.py --out runs/demo

# two workers (CI's cores; TEST_JOBS=1 for a serial run): tests/parallel.py groups the work
TEST_JOBS ?= 2
XDIST := $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadgroup)
test: $(VENV)/.installed $(CHROMIUM)
	$(PY) -m pytest -q $(XDIST)

# the inner loop: no child processes, torchrun, DataLoader or pack workers, S3 server, doc
# blocks, benchmarks or browser (tests/markers.py assigns those markers by rule); make test
# runs every tier
quick: $(VENV)/.installed
	$(PY) -m pytest -q $(XDIST) -m "not (proc or ddp or s3 or docs or bench or browser or workers)"

wheel-check: $(VENV)/.installed
	PY=$(abspath $(PY)) bash tools/check_wheel.sh

clean:
	rm -rf runs/demo .pytest_cache
