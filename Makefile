# Two commands on a fresh machine with Python 3.11+: `make dev` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The layer's package and devstack are plain source trees, importable the way Lambda sees them.
export PYTHONPATH := $(CURDIR)/layers/common:$(CURDIR)
STAMP  := $(VENV)/.installed-stamp
# The SAM CLI lives in its own venv (its pins clash with the project's); uv installs it in seconds.
SAM_VENV        := .venv-sam
SAM_CLI_VERSION := 1.170.0
SAM_STAMP       := $(SAM_VENV)/.installed-sam-$(SAM_CLI_VERSION)
# checkov, the template scanner `make lint` runs, has a venv of its own as well (its pins would downgrade boto3 and
# botocore under moto); pinned, so a new release cannot turn the build red (docs/OPERATIONS.md#the-template-scanner).
CHECKOV_VENV    := .venv-checkov
CHECKOV_VERSION := 3.3.30
CHECKOV_STAMP   := $(CHECKOV_VENV)/.installed-checkov-$(CHECKOV_VERSION)

.PHONY: dev carrier-rug-pull demo reconcile audit-verify policy-publish policy-show test lint unit live tokens openapi sam build smoke bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

## make dev: the whole service on http://127.0.0.1:3000 (PORT, MOTO_PORT, ANTHROPIC_API_KEY honoured).
## PARAMS="TurnsPerMinute=100 RefundThresholdCents=10000": template parameter overrides, read as
## `sam deploy --parameter-overrides` reads them; an unknown name stops before anything starts.
## CARRIER=1: also a local outside MCP server (a carrier-tracking stub on CARRIER_PORT, default 8765) the agent
## may use, configured from devstack/mcp_servers.json; TOOL_MODE=mcp: the loop reaches our own tools over MCP
## (docs/MCP.md). Both may combine: `CARRIER=1 TOOL_MODE=mcp make dev`.
## POLICY=path/to/policy.json: published as the support policy's newest version right after the deploy; a file that
## does not validate stops before anything starts (docs/POLICY.md).
PARAMS ?=
POLICY ?=
dev: $(STAMP)
	$(PY) -m devstack$(if $(POLICY), --policy '$(POLICY)') $(PARAMS)

## make carrier-rug-pull: the running `CARRIER=1 make dev` stub's track_parcel gets a poisoned description (the
## pin no longer matches: within 15 s the tool is off the model's list); RESTORE=1 puts the original back
RESTORE ?=
carrier-rug-pull: $(STAMP)
	$(PY) -m devstack.carrier_mcp describe $(if $(RESTORE),--restore)

## make demo: the seed scenario through the local stack, printed step by step (PARAMS as for make dev)
demo: $(STAMP)
	$(PY) -m devstack.demo $(PARAMS)

## make reconcile: the refund ledger of the running `make dev` stack compared with its Stripe (simulated unless
## STRIPE_API_BASE and STRIPE_API_KEY are set), one line per difference; DAYS=14 widens the window (default 7)
DAYS ?=
reconcile: $(STAMP)
	$(PY) -m devstack.reconcile $(if $(DAYS),--days $(DAYS))

## make policy-publish FILE=policy.json: a new version of the running `make dev` stack's support policy (refused,
## nothing put, when the file does not validate); VERSION=2 instead publishes version 2's document again (a rollback).
## make policy-show: every version, valid or refused, and the one that applies; VERSION=2 prints that one's document.
FILE ?=
VERSION ?=
policy-publish: $(STAMP)
	@$(PY) -m devstack.policy publish $(if $(FILE),--file '$(FILE)') $(if $(VERSION),--version $(VERSION))

policy-show: $(STAMP)
	@$(PY) -m devstack.policy show $(if $(VERSION),--version $(VERSION))

## make audit-verify CONVERSATION=conv_… (or APPROVAL=apr_…): the audit trail's hash chains in the running
## `make dev` stack, one line per stream (the conversation's and each one it names); exit 1 when one is broken
CONVERSATION ?=
APPROVAL ?=
audit-verify: $(STAMP)
	$(PY) -m devstack.audit_verify $(if $(CONVERSATION),--conversation $(CONVERSATION)) $(if $(APPROVAL),--approval $(APPROVAL))

## make test: lint, types and the whole offline suite (unit + integration on template.yaml in moto), on
## TEST_WORKERS pytest-xdist workers (default 2; 0 runs it in one process), each module whole on one worker
## and tests/e2e together (--dist loadfile, see tests/conftest.py)
TEST_WORKERS ?= 2
test: lint $(SAM_STAMP)
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile

## make lint: ruff, mypy, the layer's import rules (lint-imports: pyproject.toml's [tool.importlinter]), cfn-lint,
## and checkov over template.yaml (0 failed checks; each check the template does not follow is skipped next to its
## resource with the reason). Offline: no download, no update check.
lint: $(STAMP) $(CHECKOV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/cfn-lint template.yaml
	env -u PYTHONPATH CKV_SKIP_PACKAGE_UPDATE_CHECK=true BC_SKIP_MAPPING=TRUE \
		$(CHECKOV_VENV)/bin/checkov -f template.yaml --framework cloudformation --quiet --compact --skip-download

$(CHECKOV_STAMP):
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q uv
	$(CHECKOV_VENV)/bin/uv pip install -q --python $(CHECKOV_VENV)/bin/python 'checkov==$(CHECKOV_VERSION)'
	touch $(CHECKOV_STAMP)

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

## make live: the opt-in tests against real services: Anthropic (ANTHROPIC_API_KEY), Stripe test mode
## (STRIPE_API_KEY=sk_test_…; a live-mode key is refused); each is skipped without its key
live: $(STAMP)
	$(VENV)/bin/pytest -q -m live tests/live

## make tokens: demo JWTs for customer 7, customer 8 and lead-1
tokens: $(STAMP)
	$(PY) -m devstack.tokens

## make openapi: regenerate docs/openapi.json from the routes and docs/asyncapi.json from the WebSocket's messages
## (a unit test fails when either is stale)
openapi: $(STAMP)
	$(PY) -m support_agent.api.openapi > docs/openapi.json.tmp && mv docs/openapi.json.tmp docs/openapi.json
	$(PY) -m support_agent.api.asyncapi > docs/asyncapi.json.tmp && mv docs/asyncapi.json.tmp docs/asyncapi.json

## make sam: the SAM CLI in .venv-sam/ (the smoke test's `sam build`; also `$(SAM_VENV)/bin/sam deploy`)
sam: $(SAM_STAMP)

$(SAM_STAMP):
	test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install -q uv
	$(SAM_VENV)/bin/uv pip install -q --python $(SAM_VENV)/bin/python 'aws-sam-cli==$(SAM_CLI_VERSION)'
	touch $(SAM_STAMP)

## make build: `sam build` for ARCH (default arm64, the template's), then every module of the layer and the
## functions precompiled for the runtime's Python: Lambda cannot write __pycache__ under /opt or /var/task,
## so without .pyc files each cold start compiles the whole layer again (docs/PERFORMANCE.md).
## RUNTIME_PYTHON: a python3.13 (found on PATH or under pyenv; its directory goes first on sam's PATH).
ARCH           ?= arm64
PYENV_ROOT     ?= $(HOME)/.pyenv
RUNTIME_PYTHON ?= $(firstword $(shell command -v python3.13 >/dev/null && python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null) $(wildcard $(PYENV_ROOT)/versions/3.13*/bin/python3.13))
PRECOMPILE     := -m compileall -q -j 0 --invalidation-mode unchecked-hash
build: $(SAM_STAMP)
	@test -n "$(RUNTIME_PYTHON)" || { echo "make build needs python3.13 (set RUNTIME_PYTHON=/path/to/python3.13)"; exit 1; }
	env -u PYTHONPATH PATH="$(dir $(RUNTIME_PYTHON)):$$PATH" $(SAM_VENV)/bin/sam build --parameter-overrides Architecture=$(ARCH)
	$(RUNTIME_PYTHON) $(PRECOMPILE) .aws-sam/build

## make smoke: sam build (x86_64 and arm64); each built function serves an event from events/ under python3.13
smoke: $(STAMP) $(SAM_STAMP)
	$(VENV)/bin/pytest -q tests/smoke

## make eval: the evaluation suite (docs/EVALUATION.md) against a local stack it starts: TASKS=ids or categories
## (comma-separated; default all), K trials each (default 3), MODEL=simulated|anthropic|openai (default simulated);
## writes evals/results/<timestamp>/ (results.json, report.md, report.html); exit 1 when a trial fails
TASKS ?=
K     ?= 3
MODEL ?= simulated
.PHONY: eval eval-live
eval: $(STAMP)
	$(PY) -m evals run $(if $(TASKS),--tasks '$(TASKS)') --k $(K) --model $(MODEL)

## make eval-live: the same on a real model: MODEL from the environment, else the first configured of
## ANTHROPIC_API_KEY, OPENAI_BASE_URL + OPENAI_API_KEY, BEDROCK_MODEL_ID; skipped (exit 0, with the reason) without one
eval-live: $(STAMP)
	env MODEL='$(MODEL)' $(PY) -m evals run $(if $(TASKS),--tasks '$(TASKS)') --k $(K) --model live

## make bench: cold starts, loop overhead, AWS calls, prompt cache and long conversations, side by side
## with the peer frameworks (installed into bench/.venv-peers, never .venv); writes docs/PERFORMANCE.md
PEERS_VENV  := bench/.venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp

$(PEERS_STAMP): bench/requirements-peers.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install -q -r bench/requirements-peers.txt
	touch $(PEERS_STAMP)

# Our handlers' cold starts run where Lambda runs them: the layer's requirements plus boto3, at .venv's versions.
LAMBDA_VENV  := bench/.venv-lambda
LAMBDA_STAMP := $(LAMBDA_VENV)/.installed-stamp

$(LAMBDA_STAMP): layers/common/requirements.txt $(STAMP)
	test -x $(LAMBDA_VENV)/bin/python || $(PYTHON) -m venv $(LAMBDA_VENV)
	$(PY) -m pip freeze --exclude-editable > $(LAMBDA_VENV)/constraints.txt
	$(LAMBDA_VENV)/bin/python -m pip install -q -c $(LAMBDA_VENV)/constraints.txt -r layers/common/requirements.txt boto3
	touch $(LAMBDA_STAMP)

bench: $(STAMP) $(PEERS_STAMP) $(LAMBDA_STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) $(PEERS_VENV) .aws-sam-smoke .pytest_cache .mypy_cache .ruff_cache .hypothesis
