"""The chat handler's cold start imports what its first request uses, and not what only other functions,
the OpenAPI document or other providers use (docs/PERFORMANCE.md, "Import time"). Each check runs in a
fresh interpreter: the test process has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Never imported by `import app` in functions/chat.
NOT_AT_IMPORT = (
    # OpenAPI only: the response models (route_docs.py names them) and the document's builder
    "support_agent.api.responses",
    "support_agent.api.openapi",
    "aws_lambda_powertools.event_handler.openapi.models",
    # Powertools' other resolvers and event classes (api/lazy_packages.py), asyncio with AppSync's
    "aws_lambda_powertools.event_handler.appsync",
    "aws_lambda_powertools.event_handler.bedrock_agent",
    "aws_lambda_powertools.event_handler.events_appsync",
    "aws_lambda_powertools.event_handler.vpc_lattice",
    "aws_lambda_powertools.event_handler.lambda_function_url",
    "aws_lambda_powertools.utilities.data_classes.sqs_event",
    "aws_lambda_powertools.utilities.data_classes.code_pipeline_job_event",
    "asyncio",
    # the model adapters (the first request builds the configured one), MCP (TOOL_MODE=mcp, McpFunction)
    "support_agent.llm.anthropic",
    "support_agent.llm.openai",
    "support_agent.llm.bedrock",
    "mcp",
    "support_agent.mcp.server",
)


def _fresh(code: str, cwd: Path = ROOT) -> list[str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'layers' / 'common'}{os.pathsep}{ROOT}",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_chat_handler_leaves_out_what_its_first_request_does_not_use() -> None:
    loaded = _fresh(
        f"import json, sys\nimport app\nprint(json.dumps([m for m in {NOT_AT_IMPORT!r} if m in sys.modules]))",
        cwd=ROOT / "functions" / "chat",
    )
    assert loaded == []


def test_the_resolver_is_imported_without_the_rest_of_powertools_event_handler() -> None:
    """What the chat handler does import is still whole: the resolver, validation, and every other name
    of the lazy packages on first use."""
    loaded = _fresh(
        "import json, sys\n"
        "import support_agent.api.http\n"
        "from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response\n"
        "assert APIGatewayHttpResolver(enable_validation=True) and Response\n"
        "before = 'aws_lambda_powertools.event_handler.appsync' in sys.modules\n"
        "from aws_lambda_powertools.event_handler import AppSyncResolver\n"
        "from aws_lambda_powertools.utilities.data_classes import SQSEvent, event_source\n"
        "assert callable(event_source) and SQSEvent.__name__ == 'SQSEvent'\n"
        "print(json.dumps([before, AppSyncResolver.__module__]))"
    )
    assert loaded == [False, "aws_lambda_powertools.event_handler.appsync"]


def test_a_package_that_does_more_than_re_export_is_imported_as_usual(tmp_path: Path) -> None:
    from support_agent.api.lazy_packages import lazy_package

    (tmp_path / "eager_pkg").mkdir()
    (tmp_path / "eager_pkg" / "__init__.py").write_text("from .part import VALUE\nSEEN = VALUE + 1\n")
    (tmp_path / "eager_pkg" / "part.py").write_text("VALUE = 1\n")
    (tmp_path / "lazy_pkg").mkdir()
    (tmp_path / "lazy_pkg" / "__init__.py").write_text('"""Doc."""\nfrom .part import VALUE\n__all__ = ["VALUE"]\n')
    (tmp_path / "lazy_pkg" / "part.py").write_text("VALUE = 2\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert lazy_package("eager_pkg") is False
        assert lazy_package("lazy_pkg") is True
        import lazy_pkg

        assert "lazy_pkg.part" not in sys.modules
        assert lazy_pkg.VALUE == 2 and lazy_pkg.__all__ == ["VALUE"]
        with pytest.raises(AttributeError):
            _ = lazy_pkg.MISSING
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("eager_pkg", "eager_pkg.part", "lazy_pkg", "lazy_pkg.part"):
            sys.modules.pop(name, None)


def test_a_bedrock_function_loads_no_http_client() -> None:
    """Bedrock goes through boto3: building its client imports neither the Anthropic adapter nor httpx."""
    loaded = _fresh(
        "import json, sys\n"
        "from support_agent.config import load_settings\n"
        "from support_agent.llm.factory import llm_client_from_settings\n"
        "llm_client_from_settings(load_settings({'LLM_PROVIDER': 'bedrock', 'BEDROCK_MODEL_ID': 'm'}))\n"
        "print(json.dumps([m for m in ('httpx', 'support_agent.llm.anthropic') if m in sys.modules]))"
    )
    assert loaded == []


def test_httpx_is_imported_without_its_command_line_client() -> None:
    loaded = _fresh(
        "import json, sys\n"
        "import support_agent.llm.factory, httpx\n"
        "print(json.dumps([m for m in ('click', 'rich') if m in sys.modules]))"
    )
    assert loaded == []
