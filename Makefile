# The two commands of the README: `make demo` and `make test`. Both set everything up
# on a fresh machine: a virtualenv with wirepath and its dev extras, and the Debian
# packages wirepath calls (installed when run as root, else named with the command);
# gcc builds the compiled helper capture.native during the pip install.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEBS := gcc libc6-dev graphviz chromium chromium-driver tcpdump tshark iproute2 nginx-light redis-server postgresql openssl
DEMO := build/demo

.PHONY: demo test setup debs lint bench paper testbed testbed-check reliability scale clean

demo: setup
	@mkdir -p $(DEMO)
	$(BIN)/wirepath convert samples/sw1.txt $(DEMO)/sw1.parquet
	$(BIN)/wirepath convert samples/sw2.txt $(DEMO)/sw2.parquet
	$(BIN)/wirepath merge $(DEMO)/sw1.parquet $(DEMO)/sw2.parquet --offset sw2.parquet=-12ms \
		--names samples/names.toml --out $(DEMO)/merged.parquet
	$(BIN)/wirepath info $(DEMO)/merged.parquet
	$(BIN)/wirepath infer nesting $(DEMO)/merged.parquet --out $(DEMO)/merged-paths.json --show 2
	$(BIN)/wirepath synth samples/synth/multitier.toml --messages 20000 --parallelism 2 \
		--out $(DEMO)/synth.parquet --truth $(DEMO)/synth-truth.json
	$(BIN)/wirepath infer nesting $(DEMO)/synth.parquet --out $(DEMO)/paths.json \
		--instances $(DEMO)/instances.parquet --show 3
	$(BIN)/wirepath eval $(DEMO)/paths.json $(DEMO)/synth.parquet --instances $(DEMO)/instances.parquet
	$(BIN)/wirepath demo --out $(DEMO)
	@echo "demo output: $(DEMO)/ (report.html, diff.svg, slow-top.svg; merged.parquet, paths.json, ...)"

# The real testbed's tests (a minute and a half of recordings) have their own target.
# One pytest worker per core (pytest-xdist): the suite takes half the time on two.
test: setup lint
	$(BIN)/pytest -m "not testbed" -n auto

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

setup: $(STAMP) debs

$(STAMP): pyproject.toml setup.py capture/native.c | debs
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "wirepath needs Python >= 3.11; found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# --no-compile: bytecode is written on first import, for the modules that are imported,
	@# not for every module of every package (half of a fresh install's time).
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev]'
	@touch $@

debs:
	@missing=""; \
	for pkg in $(DEBS); do dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q $$missing >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null; }; \
	  else \
	    echo "error: missing Debian packages:$$missing; install them with: sudo apt-get install -y$$missing" >&2; exit 1; \
	  fi; \
	fi

# Speed and memory, each beside its baseline (results: BENCHMARKS.md); `make paper`
# reruns the paper's experiments (results: docs/paper-reproduction.md).
bench: setup
	$(BIN)/python benchmarks/trace_io.py
	$(BIN)/python benchmarks/synth.py
	$(BIN)/python benchmarks/nesting.py
	$(BIN)/python benchmarks/convolution.py
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/http2.py
	$(BIN)/python benchmarks/live.py
	$(BIN)/python benchmarks/demo.py
	$(BIN)/python benchmarks/trend.py

paper: setup
	$(BIN)/python benchmarks/paper_nesting.py
	$(BIN)/python benchmarks/paper_convolution.py

# The real testbed (root): nginx, two app servers, Redis, PostgreSQL and gRPC in network
# namespaces; a base run and one run per injected fault, captured and diffed, then the
# per-request scores at three loads (samples/testbed/real/README.md). About four minutes.
testbed: setup
	timeout 600 $(BIN)/python samples/testbed/real/realbed.py run --out build/testbed
	timeout 600 $(BIN)/python samples/testbed/real/realbed.py loads --out build/testbed-loads

# The real testbed's pass condition alone (root; skipped without it): the recordings and
# the three faults found by default. About a minute and a half.
testbed-check: setup
	timeout 600 $(BIN)/pytest -m testbed tests/capture/test_testbed_real.py

# Hostile inputs per verb, fuzzing, faults (root: a full tmpfs, a network namespace) and
# load (a 10 GB capture converted whole, 50 M messages inferred whole), measured and
# written to docs/reliability.md. About two hours on an idle machine, the inference 70
# minutes of them (`--skip biginfer` keeps its last figures).
reliability: setup
	timeout 9000 $(BIN)/python benchmarks/reliability.py

# Each Dask-capable verb in one process next to a local cluster of 2 workers, with the
# bytes moved (docs/scaling.md). About ten minutes.
scale: setup
	timeout 1800 $(BIN)/python benchmarks/scale.py --workers 2

clean:
	rm -rf build $(VENV) .pytest_cache .ruff_cache .hypothesis
