"""Which model answers the local stack's functions, and the environment that points them at it.

``LLM_PROVIDER`` names the adapter (anthropic, openai, bedrock); the provider's own setting says whether a real
model answers: ``ANTHROPIC_API_KEY``, ``OPENAI_BASE_URL``, ``BEDROCK_MODEL_ID``. Without it the simulated model
answers, over that provider's wire (devstack/simulated_model). Bedrock is the odd one: the functions reach every
other AWS service at moto, so its client alone is sent elsewhere (``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, which boto3
prefers to ``AWS_ENDPOINT_URL``), and a real Bedrock needs this shell's AWS credentials, resolved here before the
stack replaces them with moto's, and handed to the functions (moto accepts any credentials).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SIMULATED_BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
REAL_SETTING = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_BASE_URL", "bedrock": "BEDROCK_MODEL_ID"}
PASSED = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "OPENAI_MAX_TOKENS_PARAM"),
    "bedrock": ("BEDROCK_MODEL_ID",),
}


class NoModel(ValueError):
    """The provider asked for cannot be reached as configured (a bad name, Bedrock without credentials)."""


@dataclass(frozen=True)
class ModelChoice:
    provider: str
    simulated: bool
    real_env: dict[str, str] = field(default_factory=dict)  # a real model's settings (and Bedrock's credentials)

    def overrides(self, model_url: str | None) -> dict[str, str]:
        """The functions' environment for this choice; ``model_url``: the simulated model's, when it answers."""
        out = {"LLM_PROVIDER": self.provider}
        if not self.simulated:
            return out | self.real_env
        assert model_url is not None, "the simulated model answers: give its URL"
        out.update(ANTHROPIC_API_KEY="simulated-local-key", ANTHROPIC_BASE_URL=model_url)
        out.update(OPENAI_API_KEY="simulated-local-key", OPENAI_BASE_URL=f"{model_url}/v1")
        if self.provider == "bedrock":
            out.update(BEDROCK_MODEL_ID=SIMULATED_BEDROCK_MODEL, AWS_ENDPOINT_URL_BEDROCK_RUNTIME=model_url)
        return out


def choose(env: Mapping[str, str]) -> ModelChoice:
    """The model ``env`` asks for. Call it before the stack's credentials replace the shell's (Bedrock's)."""
    provider = env.get("LLM_PROVIDER") or "anthropic"
    if provider not in REAL_SETTING:
        raise NoModel(f"LLM_PROVIDER={provider!r}: one of {', '.join(REAL_SETTING)}")
    if not env.get(REAL_SETTING[provider]):
        return ModelChoice(provider, simulated=True)
    real = {k: env[k] for k in PASSED[provider] if env.get(k)}
    if provider == "bedrock":
        real.update(_bedrock_access(env))
    return ModelChoice(provider, simulated=False, real_env=real)


def _bedrock_access(env: Mapping[str, str]) -> dict[str, str]:
    """Bedrock's endpoint, region and this shell's credentials (a profile's resolved too), frozen for the run."""
    import boto3

    model = env["BEDROCK_MODEL_ID"]
    arn_region = model.split(":")[3] if model.startswith("arn:") and model.count(":") >= 5 else ""
    region = env.get("BEDROCK_REGION") or arn_region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    region = region or "us-east-1"
    key, secret, token = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY"), env.get("AWS_SESSION_TOKEN")
    if not (key and secret):  # a profile, SSO, an instance role: boto3's chain, resolved now
        credentials = boto3.Session(profile_name=env.get("AWS_PROFILE") or None).get_credentials()
        if credentials is None:
            raise NoModel("BEDROCK_MODEL_ID is set but no AWS credentials were found for bedrock-runtime")
        frozen = credentials.get_frozen_credentials()
        key, secret, token = frozen.access_key, frozen.secret_key, frozen.token
    access = {
        "BEDROCK_REGION": region,
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": f"https://bedrock-runtime.{region}.amazonaws.com",
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    if token:
        access["AWS_SESSION_TOKEN"] = token
    return access
