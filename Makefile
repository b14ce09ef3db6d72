# Two commands on a fresh machine with Python 3.11+: `make dev` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The layer's package and devstack are plain source trees, importable the way Lambda sees them.
export PYTHONPATH := $(CURDIR)/layers/common:$(CURDIR)
STAMP  := $(VENV)/.installed-stamp

.PHONY: dev demo test lint unit live tokens clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

## make dev: the whole service on http://127.0.0.1:3000 (PORT, MOTO_PORT, ANTHROPIC_API_KEY honoured)
dev: $(STAMP)
	$(PY) -m devstack

## make demo: the seed scenario through the local stack, printed step by step
demo: $(STAMP)
	$(PY) -m devstack.demo

## make test: lint, types and the whole offline suite (unit + integration on template.yaml in moto)
test: lint
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/cfn-lint template.yaml

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

## make live: the opt-in test against the real Anthropic API (needs ANTHROPIC_API_KEY)
live: $(STAMP)
	$(VENV)/bin/pytest -q -m live tests/live

## make tokens: demo JWTs for customer 7, customer 8 and lead-1
tokens: $(STAMP)
	$(PY) -m devstack.tokens

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
