"""Fixtures the template tests share: template.yaml as written, and translated into CloudFormation."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.stack import load_template, translate


@pytest.fixture(scope="module")
def sam() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def cfn(sam: dict[str, Any]) -> dict[str, Any]:
    return translate(sam)
