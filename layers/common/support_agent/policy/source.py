"""Where the support policy is read from: the newest version of an SSM parameter that validates.

Read with Powertools' parameters utility (a provider of our own, so each value comes back with SSM's
``Version``) and kept in its cache for ``POLICY_CACHE_SECONDS``. What is cached is the resolution, not the raw
value: when the newest version does not validate it is refused (an error log naming the version and why, the
``PolicyRefused`` metric) and the newest older version that validates is found in GetParameterHistory — a cold
start has no "last good" in memory — and that answer is kept as long as a good one would be, so a bad version is
neither fetched nor walked past on every call. No version validating is `PolicyUnavailable` (cached the same way).

Without a parameter (unit tests, a stack that declares none) the built-in `default_policy` with
REFUND_THRESHOLD_CENTS applies, as version 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.parameters import BaseProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from pydantic import ValidationError

from support_agent.config import Settings
from support_agent.errors import PolicyUnavailable
from support_agent.observability import POLICY_REFUSED, emit, logger
from support_agent.policy.model import AppliedPolicy, PolicyReader, StaticPolicy, SupportPolicy, default_policy

_APPLIED = "applied"
_UNAVAILABLE = "unavailable"
_HISTORY_PAGE = 50  # GetParameterHistory's largest page; SSM keeps a parameter's last 100 versions


def refusal(exc: ValidationError) -> str:
    """A pydantic error in one line: each field's location and what is wrong with it."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}" for e in exc.errors(include_url=False)
    )


def _validated(value: str) -> SupportPolicy | str:
    try:
        return SupportPolicy.model_validate_json(value)
    except ValidationError as exc:
        return refusal(exc)


class PolicyParameterProvider(BaseProvider):
    """Powertools' provider of one SSM String parameter holding the policy: ``get`` answers the applied version
    (``{"applied": AppliedPolicy}``) or why none applies (``{"unavailable": reason}``), and caches that answer."""

    def __init__(self, client: Any) -> None:
        super().__init__(client=client)
        self.client = client

    def _get(self, name: str, **sdk_options: Any) -> dict[str, Any]:
        parameter = self.client.get_parameter(Name=name)["Parameter"]
        newest, policy = int(parameter["Version"]), _validated(parameter["Value"])
        if isinstance(policy, SupportPolicy):
            return {_APPLIED: AppliedPolicy(newest, policy)}
        emit(POLICY_REFUSED)
        fallback = self._newest_valid_before(name, newest)
        logger.error(
            "support_policy_refused",
            extra={
                "event": "support_policy_refused",
                "parameter": name,
                "version": newest,
                "error": policy,
                "applied_version": fallback.version if fallback else None,
            },
        )
        if fallback is None:
            return {_UNAVAILABLE: f"version {newest} of {name} is refused ({policy}) and no earlier version validates"}
        return {_APPLIED: fallback}

    def _newest_valid_before(self, name: str, refused: int) -> AppliedPolicy | None:
        versions: list[dict[str, Any]] = []
        pages = self.client.get_paginator("get_parameter_history")
        for page in pages.paginate(Name=name, PaginationConfig={"PageSize": _HISTORY_PAGE}):
            versions.extend(page["Parameters"])
        for entry in sorted(versions, key=lambda v: int(v["Version"]), reverse=True):
            version = int(entry["Version"])
            if version >= refused:
                continue
            policy = _validated(entry["Value"])
            if isinstance(policy, SupportPolicy):
                return AppliedPolicy(version, policy)
            logger.warning(
                "support_policy_version_skipped",
                extra={"event": "support_policy_version_skipped", "parameter": name, "version": version},
            )
        return None

    def _get_multiple(self, path: str, **sdk_options: Any) -> dict[str, str]:
        raise NotImplementedError("the support policy is one parameter")

    def keep(self, name: str, answer: dict[str, Any], max_age: int) -> None:
        """Cache ``answer`` again (SSM unreadable: the last applied version goes on for another ``max_age``)."""
        self.add_to_cache(key=self._build_cache_key(name=name), value=answer, max_age=max_age)


class PolicySource:
    """The support policy's newest valid version in SSM parameter ``parameter``; the client is built on the first
    `current` (never at import or cold start), through ``client_factory``."""

    def __init__(self, parameter: str, client_factory: Callable[[], Any], max_age: int) -> None:
        self.parameter = parameter
        self.max_age = max_age
        self._client_factory = client_factory
        self._provider: PolicyParameterProvider | None = None
        self._last: AppliedPolicy | None = None

    def provider(self) -> PolicyParameterProvider:
        if self._provider is None:
            self._provider = PolicyParameterProvider(self._client_factory())
        return self._provider

    def current(self) -> AppliedPolicy:
        """The version to apply now; `PolicyUnavailable` when there is none."""
        provider = self.provider()
        try:
            answer = provider.get(self.parameter, max_age=self.max_age)
        except GetParameterError as exc:
            if self._last is None:
                raise PolicyUnavailable(f"the support policy {self.parameter} could not be read: {exc}") from exc
            # SSM unreadable for a moment: the version applied so far goes on rather than every action failing.
            logger.warning(
                "support_policy_unreadable",
                extra={"event": "support_policy_unreadable", "parameter": self.parameter, "error": str(exc)[:300]},
            )
            provider.keep(self.parameter, {_APPLIED: self._last}, self.max_age)
            return self._last
        if not isinstance(answer, dict) or _APPLIED not in answer:
            raise PolicyUnavailable(str(answer.get(_UNAVAILABLE) if isinstance(answer, dict) else answer))
        applied: AppliedPolicy = answer[_APPLIED]
        self._last = applied
        return applied


def policy_source(settings: Settings, ssm_client_factory: Callable[[], Any]) -> PolicyReader:
    """SUPPORT_POLICY_PARAMETER's newest valid version, or without one the built-in default with
    REFUND_THRESHOLD_CENTS (as today)."""
    if not settings.support_policy_parameter:
        return StaticPolicy(AppliedPolicy(0, default_policy(settings.refund_threshold_cents)))
    return PolicySource(settings.support_policy_parameter, ssm_client_factory, settings.policy_cache_seconds)
