# The README's two commands: `make demo` (set-up + local demo) and `make test` (set-up + every check).
VENV ?= .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup system-deps demo test lint bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# Debian packages for the TLS (stunnel4) and Kerberos (MIT KDC, GSSAPI librdkafka) tests, then
# $(GSSAPI_VENV): confluent-kafka built against Debian's librdkafka (has GSSAPI; ~10 s, kept when it works).
GSSAPI_VENV ?= .venv-gssapi
system-deps: setup
	bash scripts/install-system-deps.sh
	PYTHON=$(abspath $(PY)) bash scripts/build-gssapi-client.sh $(abspath $(GSSAPI_VENV))

demo: setup
	$(VENV)/bin/kmirror demo

lint: setup
	$(VENV)/bin/ruff check kmirror spark_app components tests bench policy scripts
	$(VENV)/bin/mypy

test: setup system-deps lint
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/mirror_bench.py
