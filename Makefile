# Inlet: two commands matter — `make demo` and `make test`. Both install first.
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
LINT_PATHS := core proto services tests $(wildcard benchmarks)
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(abspath $(VENV))

# Apache Hudi's Spark 3.5 bundles (the oracle test layer, tests/oracle/) run on PySpark 3.5, in a
# virtualenv of their own: the project's .venv has PySpark 4.3, which no Apache Hudi bundle supports.
ORACLE_VENV := $(TOOLS)/hudi-oracle
ORACLE_REQUIREMENTS := tests/oracle/requirements.txt

.PHONY: install demo demo-s3 test test-fast check bench clean proto docs

# The Java parts (Apache Kafka, Hive's metastore, Apache Hudi's Spark bundles) are pinned in
# services/src/inlet/services/stack/maven/pom.xml and resolved by mvn into Maven's local repository
# (checksums checked); the stack and the tests read the classpath files it writes, offline.

# Bytecode is compiled at install (site-packages by uv, the workspace's own sources by compileall):
# where PYTHONDONTWRITEBYTECODE is set, as on these machines, no process writes its .pyc, and every
# Python process (each service of a stack, each CLI call, each Spark worker) compiled pandas, pyarrow,
# PySpark and Inlet anew: `inlet --help` took 5.5 s instead of 2.

# Bootstrap uv into a private tools venv (works where the system pip is externally managed),
# then install the whole workspace from the lock file into .venv.
$(UV):
	@$(PYTHON) -m venv $(TOOLS) 2>/dev/null && $(TOOLS)/bin/pip install -q --disable-pip-version-check uv==$(UV_VERSION) \
	  || { rm -rf $(TOOLS); mkdir -p $(TOOLS)/bin $(TOOLS)/pkgs; \
	       $(PYTHON) -m pip install -q --disable-pip-version-check --target $(TOOLS)/pkgs uv==$(UV_VERSION) && \
	       ln -sf ../pkgs/bin/uv $(UV); }

# MIT Kerberos (a KDC for the Kerberos metastore test, and the headers the `kerberos` bindings of
# `inlet-services[kerberos]` build against) comes from Debian: installed when missing and allowed
# (root, apt-get), best effort; without it the one Kerberos test skips and says why.
KRB5_DEBS := krb5-kdc krb5-admin-server libkrb5-dev
install: $(UV) $(ORACLE_VENV)/installed
	@command -v krb5kdc >/dev/null && command -v krb5-config >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && export DEBIAN_FRONTEND=noninteractive && \
	    timeout 300 apt-get update -qq >/dev/null 2>&1 && \
	    timeout 300 apt-get install -y -qq --no-install-recommends $(KRB5_DEBS) >/dev/null 2>&1; } || \
	  echo "make install: no MIT Kerberos here (apt-get install $(KRB5_DEBS)); the Kerberos metastore test will skip"
	$(UV) sync --locked --all-packages --compile-bytecode $$(command -v krb5-config >/dev/null && echo --extra kerberos) --python $(PYTHON)
	@test -x $(VENV)/bin/inlet
	@$(VENV)/bin/python -m compileall -q -j 0 core/src services/src proto/src >/dev/null
	$(VENV)/bin/python -m inlet.services.stack.maven

# Remade only when the pins change (a stamp file records the install).
$(ORACLE_VENV)/installed: $(ORACLE_REQUIREMENTS) | $(UV)
	$(UV) venv -q --allow-existing --python $(PYTHON) $(ORACLE_VENV)
	$(UV) pip install -q --compile-bytecode --python $(ORACLE_VENV)/bin/python -r $(ORACLE_REQUIREMENTS)
	@touch $@

# LAKE=s3 (or `make demo-s3`): the lake in the stack's own SeaweedFS bucket, read and checked over S3;
# LAKE=s3://BUCKET/PREFIX: an external store (AWS_* environment).
LAKE ?= local
demo: install
	$(VENV)/bin/python -m inlet.services.demo --lake $(LAKE)

demo-s3: LAKE := s3
demo-s3: demo

check: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy core/src/inlet/core
	$(VENV)/bin/mypy services/src/inlet/services
	$(VENV)/bin/python tests/check_layering.py
	$(VENV)/bin/python proto/generate.py --check
	$(VENV)/bin/python -m inlet.services.settings_doc --check
	$(VENV)/bin/buf lint proto
	proto/check_breaking.sh

# Regenerate docs/settings.md from the services' settings tables after changing a Setting.
docs: install
	$(VENV)/bin/python -m inlet.services.settings_doc --write

# Regenerate the committed protobuf/gRPC stubs after editing proto/src/**/*.proto.
proto: install
	$(VENV)/bin/python proto/generate.py

# Three workers on this machine's two cores: most tests spend their time waiting for servers they
# started (a run with two workers kept the load average at 2-4), so a third overlaps the waits: 15.5
# instead of 19.5 minutes for the same tests. Every test module is one work unit, the Spark tests and
# the whole-stack tests one each (tests/conftest.py), handed out longest first.
PYTEST_WORKERS ?= 3
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --no-loadscope-reorder
PYTEST_ARGS ?=

# --durations: every run lists its 25 slowest phases, so a test that grows shows up in CI's log.
# The suite takes ~40 minutes here (over its 20-minute budget since Apache Kafka, Hive's metastore 4
# and Apache Hudi's Spark processes replaced the stand-ins: being cut down); past 75 it is
# interrupted (SIGINT: pytest still prints what failed), so a stalled run says why inside CI's 90
# minutes instead of being cut off silently.
test: install check
	timeout -s INT -k 120 4500 $(VENV)/bin/python -m pytest -q $(PYTEST_PARALLEL) --durations=25 $(PYTEST_ARGS) tests

# The edit loop: the unit and interoperability layers only (a few minutes).
test-fast: install
	$(VENV)/bin/python -m pytest -q $(PYTEST_PARALLEL) $(PYTEST_ARGS) tests/unit tests/interop

# Benchmarks compare Inlet with its peers (delta-rs, PyIceberg) in one run and print a table.
bench: $(UV)
	$(UV) sync --locked --all-packages --group bench --python $(PYTHON)
	$(VENV)/bin/python benchmarks/mor_upsert.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache
