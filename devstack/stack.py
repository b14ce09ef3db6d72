"""Deploy template.yaml into moto: the same resources, names and policies the real stack gets.

Used by the integration tests (inside ``moto.mock_aws()``) and by ``make dev`` (against a moto
server: pass ``endpoint_url``, or set ``AWS_ENDPOINT_URL``). Nothing here imports the function
code; the Lambda code is a placeholder zip, and callers run the handlers in-process with
:meth:`Stack.function_env`.

Steps: load the SAM template (CloudFormation short-form tags become long-form dicts), point
every CodeUri/ContentUri/DefinitionUri at a placeholder S3 object, translate with
aws-sam-translator, strip what moto cannot deploy, ``create_stack`` and wait.

What moto cannot deploy, and what is done about it (the one place this is decided):

* ``AutoPublishAlias``, ``DeploymentPreference``, ``ProvisionedConcurrencyConfig`` and
  ``SnapStart`` on functions (and in Globals) are removed before translation: they produce
  ``AWS::Lambda::Version``/``Alias`` and CodeDeploy resources moto's CloudFormation fails on.
  What names such a function's alias (``!Ref Fn.Alias``, ``${Fn.Alias}`` in a Sub: the WebSocket API's
  integration and invoke permission) names the function itself instead (:func:`_unalias`).
* ``AWS::ApiGatewayV2::*`` (the HTTP API, its stage and routes) is dropped: moto's CloudFormation
  would skip it anyway. The routes are read from the SAM template's HttpApi events instead
  (:attr:`Stack.routes`), and the local server maps them to the handlers.
* ``AWS::CloudWatch::Alarm`` and ``AWS::Scheduler::Schedule`` are dropped: moto skips them too.
  Schedules are driven locally by calling the function directly.
* ``AWS::Lambda::EventSourceMapping`` is dropped: with one, moto receives every message sent to
  the queue itself (counting a receive) and invokes the placeholder code in Docker. Queue
  consumers are run in-process on messages received from the deployed queue.
* Whatever references a dropped resource is dropped with it, and said so in
  :attr:`Stack.skipped`: the ``AWS::Lambda::Permission`` that lets API Gateway invoke a
  function, and outputs such as ``ApiUrl`` (the local URL is the dev server's).

What moto deploys differently, repaired after ``create_stack`` (:func:`_repair_moto_state`):

* A bucket's ``VersioningConfiguration`` and ``ObjectLockConfiguration`` are ignored (the sealed audit
  heads' bucket would accept deletes): both are put again through the S3 API, the retention's parameter
  resolved, before anything is written to it.
* Inline role policies are stored as Python dicts, which moto's own IAM enforcement cannot read
  (it ``json.loads`` them), and an ``AWS::NoValue`` list item (the optional secret statement)
  stays in the list as ``null``. Each role's inline policies are put again as JSON, nulls removed.
* ``Number`` parameters reach Lambda environments as numbers; they are put again as strings,
  as AWS has them.
* State machines (:func:`_recreate_state_machines`): moto's CloudFormation ignores
  ``DefinitionS3Location`` and ``DefinitionSubstitutions`` (the machine gets an empty definition)
  and keeps it where the executing Step Functions backend (``mock_aws(config={"stepfunctions":
  {"execute_state_machine": True}})``) never sees it. Each is created again through the Step
  Functions API from its ASL file in the repo, substitutions applied with the physical names,
  under the same name, type and role; one of that name already visible to the API (execution off)
  is deleted first. The ARN is therefore the one ``Ref`` resolved to, so the outputs and every
  function's environment (``REFUND_FLOW_ARN``) already point at the executable machine:
  :meth:`Stack.state_machine_arn`.

Known and accepted: moto's CloudFormation ignores a role's ``ManagedPolicyArns`` (logs, X-Ray;
the handlers run in-process and need neither), a function's ``Layers`` and ``Architectures``,
and a table's ``PointInTimeRecoverySpecification``. The unit tests check those on the template.
moto's IAM enforcement (``moto.core.authorization.enable_iam_authentication``) authorises
DynamoDB calls against ``Resource: "*"``, so these resource-scoped statements deny every
DynamoDB call there; a runtime check of the actions needs the statements with ``Resource: "*"``.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import json
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import yaml
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.utils.py27hash_fix import to_py27_compatible_template, undo_mark_unicode_str_in_template

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
PLACEHOLDER_BUCKET = "devstack-placeholder-code"
PLACEHOLDER_KEY = "code.zip"
DEFAULT_STACK_NAME = "support-agent"

# Function properties whose resources moto's CloudFormation cannot create (see module docstring).
UNSUPPORTED_FUNCTION_PROPERTIES = (
    "AutoPublishAlias",
    "DeploymentPreference",
    "ProvisionedConcurrencyConfig",
    "SnapStart",
)
# Resource types dropped after translation, with the reason reported in Stack.skipped.
UNSUPPORTED_RESOURCE_TYPES = {
    "AWS::ApiGatewayV2::": "API Gateway v2 is not deployed by moto; routes come from the template",
    "AWS::CloudWatch::Alarm": "alarms are not deployed by moto",
    "AWS::Scheduler::": "EventBridge Scheduler is not deployed by moto; call the function directly",
    # Its one statement denies requests without TLS; moto's endpoint here is plain HTTP.
    "AWS::S3::BucketPolicy": "moto's CloudFormation does not deploy bucket policies (the TLS-only deny)",
    "AWS::Lambda::EventSourceMapping": (
        "moto would receive each sent message and invoke the placeholder code in Docker; "
        "the queue consumer is run in-process on received messages instead"
    ),
}
_CODE_PROPERTIES = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
    "AWS::Serverless::StateMachine": "DefinitionUri",
    "AWS::Serverless::Api": "DefinitionUri",
    "AWS::Serverless::HttpApi": "DefinitionUri",
}


# ------------------------------------------------------------------ template loading


class _CfnLoader(yaml.SafeLoader):
    """A YAML loader that turns CloudFormation short-form tags into their long form."""


def _construct_tag(loader: _CfnLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "Condition":
        return {"Condition": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        value = [resource, attribute]
    return {f"Fn::{tag_suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_tag)


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The SAM template as a dict, with ``!Ref x`` as ``{"Ref": x}``, ``!GetAtt a.b`` as
    ``{"Fn::GetAtt": [a, b]}`` and so on."""
    with path.open(encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_CfnLoader)


def translate(
    sam_template: Mapping[str, Any], parameters: Mapping[str, str] | None = None, region: str = "us-east-1"
) -> dict[str, Any]:
    """The CloudFormation samtranslator makes of ``sam_template``, code pointed at the placeholder.

    The result is what a real deployment gets, minus code locations; it is not yet stripped for moto.
    This is ``samtranslator.translator.transform.transform`` with an explicit region (so it needs no
    AWS configuration) and no managed-policy lookup (the template names no managed policy by short
    name, so there is nothing to look up in IAM).
    """
    template = copy.deepcopy(dict(sam_template))
    for resource in template.get("Resources", {}).values():
        prop = _CODE_PROPERTIES.get(resource.get("Type", ""))
        props = resource.get("Properties", {})
        if prop and isinstance(props.get(prop), str):
            props[prop] = f"s3://{PLACEHOLDER_BUCKET}/{PLACEHOLDER_KEY}"
    parameter_values = dict(parameters or {})
    to_py27_compatible_template(template, parameter_values)
    translator = Translator(None, Parser(), boto_session=boto3.Session(region_name=region))
    translated = translator.translate(template, parameter_values, get_managed_policy_map=dict)
    return dict(undo_mark_unicode_str_in_template(translated))


# ------------------------------------------------------------------ stripping for moto


def _remove_unsupported_function_properties(sam_template: dict[str, Any]) -> list[str]:
    removed: list[str] = []
    targets = [("Globals", sam_template.get("Globals", {}).get("Function", {}))]
    targets += [
        (logical_id, resource.get("Properties", {}))
        for logical_id, resource in sam_template.get("Resources", {}).items()
        if resource.get("Type") == "AWS::Serverless::Function"
    ]
    for owner, props in targets:
        for prop in UNSUPPORTED_FUNCTION_PROPERTIES:
            if props.pop(prop, None) is not None:
                removed.append(f"{owner}.{prop}")
    aliased = {r.removesuffix(".AutoPublishAlias") for r in removed if r.endswith(".AutoPublishAlias")}
    sam_template["Resources"] = _unalias(sam_template["Resources"], aliased - {"Globals"})
    if "Outputs" in sam_template:
        sam_template["Outputs"] = _unalias(sam_template["Outputs"], aliased - {"Globals"})
    return removed


def _unalias(node: Any, functions: set[str]) -> Any:
    """``node`` with ``{"Ref": "Fn.Alias"}`` as ``{"Ref": "Fn"}`` and ``${Fn.Alias}`` as ``${Fn.Arn}`` for each of
    ``functions`` (their alias stripped): both then name the one unversioned function moto deploys."""
    if isinstance(node, dict):
        if set(node) == {"Ref"} and isinstance(node["Ref"], str) and node["Ref"].removesuffix(".Alias") in functions:
            return {"Ref": node["Ref"].removesuffix(".Alias")}
        if "Fn::Sub" in node:
            value = node["Fn::Sub"]
            text = value if isinstance(value, str) else value[0]
            for name in functions:
                text = text.replace("${" + name + ".Alias}", "${" + name + ".Arn}")
            node = {**node, "Fn::Sub": text if isinstance(value, str) else [text, *value[1:]]}
        return {key: _unalias(value, functions) for key, value in node.items()}
    if isinstance(node, list):
        return [_unalias(item, functions) for item in node]
    return node


def _references(node: Any) -> Iterator[str]:
    """Logical ids a template fragment refers to (Ref, Fn::GetAtt, Fn::Sub, DependsOn)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                yield value
            elif key == "Fn::GetAtt":
                yield (value.split(".")[0] if isinstance(value, str) else value[0])
            elif key == "Fn::Sub":
                text = value if isinstance(value, str) else value[0]
                for name in _sub_names(text):
                    yield name.split(".")[0]
                if not isinstance(value, str):
                    yield from _references(value[1])
            elif key == "DependsOn":
                yield from [value] if isinstance(value, str) else value
            else:
                yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


def _sub_names(text: str) -> Iterator[str]:
    start = text.find("${")
    while start != -1:
        end = text.find("}", start)
        name = text[start + 2 : end]
        if not name.startswith("!"):
            yield name
        start = text.find("${", end)


LOCAL_WEBSOCKET_API_ID = "local"  # the apiId devstack/websocket_gateway.py puts in its events


def _inline_websocket_api_ids(template: dict[str, Any]) -> None:
    """A WEBSOCKET Api's id, where anything else uses it, becomes ``"local"``, in place.

    The functions' environment (WEBSOCKET_URL, WEBSOCKET_CALLBACK_URL) and the ``execute-api:ManageConnections``
    statement name the API's id; dropped with the API, they would take the functions and their roles with them.
    devstack serves that API itself (devstack/websocket_gateway.py) and overrides both URLs in the workers.
    """
    resources = template["Resources"]
    apis = {
        name
        for name, r in resources.items()
        if r["Type"] == "AWS::ApiGatewayV2::Api" and r.get("Properties", {}).get("ProtocolType") == "WEBSOCKET"
    }

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"Ref"} and node["Ref"] in apis:
                return LOCAL_WEBSOCKET_API_ID
            if set(node) == {"Fn::Sub"}:
                value = node["Fn::Sub"]
                text = value if isinstance(value, str) else value[0]
                for api in apis:
                    text = text.replace("${" + api + "}", LOCAL_WEBSOCKET_API_ID)
                return {"Fn::Sub": text if isinstance(value, str) else [text, inline(value[1])]}
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    for name, resource in list(resources.items()):
        if not resource["Type"].startswith("AWS::ApiGatewayV2::"):
            resources[name] = inline(resource)
    if "Outputs" in template:
        template["Outputs"] = inline(template["Outputs"])


def strip_for_moto(template: dict[str, Any]) -> dict[str, str]:
    """Drop, in place, resources moto cannot deploy and everything referring to them (a WebSocket API's id
    inlined first: `_inline_websocket_api_ids`).

    Returns ``{logical id or "Outputs.<name>": reason}``.
    """
    _inline_websocket_api_ids(template)
    resources = template["Resources"]
    skipped: dict[str, str] = {}
    for logical_id, resource in list(resources.items()):
        for prefix, reason in UNSUPPORTED_RESOURCE_TYPES.items():
            if resource["Type"].startswith(prefix):
                skipped[logical_id] = reason
                del resources[logical_id]
    changed = True
    while changed:  # a dropped resource takes its dependents with it
        changed = False
        for logical_id, resource in list(resources.items()):
            gone = sorted(set(_references(resource)) & skipped.keys())
            if gone:
                skipped[logical_id] = f"refers to {', '.join(gone)}"
                del resources[logical_id]
                changed = True
    for name, output in list(template.get("Outputs", {}).items()):
        gone = sorted(set(_references(output)) & skipped.keys())
        if gone:
            skipped[f"Outputs.{name}"] = f"refers to {', '.join(gone)}"
            del template["Outputs"][name]
    return skipped


# ------------------------------------------------------------------ the deployed stack


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    function: str  # logical id of the function serving it


@dataclass(frozen=True)
class Stack:
    name: str
    parameters: dict[str, str]
    outputs: dict[str, str]
    physical_ids: dict[str, str]  # logical id -> physical id, of the deployed (translated) resources
    routes: list[Route]
    template: dict[str, Any]  # the translated CloudFormation, as samtranslator produced it (pre-strip)
    sam_template: dict[str, Any]  # template.yaml as loaded
    skipped: dict[str, str]  # logical id (or Outputs.<name>) -> why it was not deployed to moto
    _session: boto3.Session = field(repr=False, compare=False)
    _endpoint_url: str | None = field(default=None, repr=False, compare=False)

    def function_env(self, logical_id: str) -> dict[str, str]:
        """The environment variables of the deployed function, as CloudFormation resolved them."""
        client = self._session.client("lambda", endpoint_url=self._endpoint_url)
        config = client.get_function_configuration(FunctionName=self.physical_ids[logical_id])
        return dict(config.get("Environment", {}).get("Variables", {}))

    def function_handler(self, logical_id: str) -> tuple[Path, str]:
        """The function's code directory in the repository and its ``module.function`` handler."""
        props = self.sam_template["Resources"][logical_id]["Properties"]
        return REPO_ROOT / props["CodeUri"], props["Handler"]

    def role_policies(self, function_logical_id: str) -> list[dict[str, Any]]:
        """The inline policy statements of the function's role in the translated template."""
        return role_statements(self.template, function_logical_id)

    def state_machine_arn(self, logical_id: str) -> str:
        """The ARN of a deployed state machine: the executable one (see the module docstring)."""
        return self.physical_ids[logical_id]


def role_statements(template: Mapping[str, Any], function_logical_id: str) -> list[dict[str, Any]]:
    """Inline policy statements (intrinsics left as they are) of a translated function's role."""
    resources = template["Resources"]
    role_ref = resources[function_logical_id]["Properties"]["Role"]
    role = resources[role_ref["Fn::GetAtt"][0]]
    statements: list[dict[str, Any]] = []
    for policy in role["Properties"].get("Policies", []):
        document = policy["PolicyDocument"]
        items = document["Statement"]
        statements.extend(items if isinstance(items, list) else [items])
    return statements


def http_routes(sam_template: Mapping[str, Any]) -> list[Route]:
    """(method, path, function) of every HttpApi event in the SAM template."""
    routes = []
    for logical_id, resource in sam_template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event in resource.get("Properties", {}).get("Events", {}).values():
            if event.get("Type") == "HttpApi":
                props = event.get("Properties", {})
                routes.append(Route(props.get("Method", "ANY").upper(), props.get("Path", "$default"), logical_id))
    return routes


def _upload_placeholder_code(session: boto3.Session, endpoint_url: str | None) -> None:
    """moto's Lambda reads function and layer code from S3 at create time: give it a small zip."""
    s3 = session.client("s3", endpoint_url=endpoint_url)
    region = s3.meta.region_name
    if region == "us-east-1":
        s3.create_bucket(Bucket=PLACEHOLDER_BUCKET)
    else:
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=PLACEHOLDER_BUCKET, CreateBucketConfiguration={"LocationConstraint": region})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("README.txt", "devstack placeholder: the code runs in-process, not from this zip.\n")
    s3.put_object(Bucket=PLACEHOLDER_BUCKET, Key=PLACEHOLDER_KEY, Body=buffer.getvalue())


def deploy(
    parameters: Mapping[str, str] | None = None,
    *,
    stack_name: str = DEFAULT_STACK_NAME,
    template_path: Path = TEMPLATE_PATH,
    session: boto3.Session | None = None,
    endpoint_url: str | None = None,
    timeout_seconds: float = 60.0,
) -> Stack:
    """Deploy the template into moto (the active ``mock_aws`` or the server at ``endpoint_url``)."""
    session = session or boto3.Session()
    params = {k: str(v) for k, v in (parameters or {}).items()}

    sam_template = load_template(template_path)
    for_moto = copy.deepcopy(sam_template)
    removed = _remove_unsupported_function_properties(for_moto)
    region = session.region_name or "us-east-1"
    translated = translate(sam_template, params, region)
    deployable = translate(for_moto, params, region) if removed else copy.deepcopy(translated)
    skipped = {name: "moto cannot create Lambda versions, aliases or CodeDeploy" for name in removed}
    skipped.update(strip_for_moto(deployable))

    _upload_placeholder_code(session, endpoint_url)

    cfn = session.client("cloudformation", endpoint_url=endpoint_url)
    cfn.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(deployable),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    description = _wait_for_create(cfn, stack_name, timeout_seconds)

    resources = cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name)
    physical_ids = {
        r["LogicalResourceId"]: r["PhysicalResourceId"] for page in resources for r in page["StackResourceSummaries"]
    }
    deployed = _Deployed(session, endpoint_url, sam_template, deployable, physical_ids, params, template_path.parent)
    _repair_moto_state(deployed)
    _recreate_state_machines(deployed)
    return Stack(
        name=stack_name,
        parameters=params,
        outputs={o["OutputKey"]: o["OutputValue"] for o in description.get("Outputs", [])},
        physical_ids=physical_ids,
        routes=http_routes(sam_template),
        template=translated,
        sam_template=sam_template,
        skipped=skipped,
        _session=session,
        _endpoint_url=endpoint_url,
    )


@dataclass(frozen=True)
class _Deployed:
    """What `deploy` created, and where: each repair after ``create_stack`` reads it from here."""

    session: boto3.Session
    endpoint_url: str | None
    sam_template: dict[str, Any]  # template.yaml as loaded
    template: dict[str, Any]  # the CloudFormation given to moto
    physical_ids: dict[str, str]
    parameters: Mapping[str, str]
    base_dir: Path  # where the template's relative paths (DefinitionUri) start

    def client(self, service: Any) -> Any:  # Any: boto3-stubs types each service name as its own literal
        return self.session.client(service, endpoint_url=self.endpoint_url)


def _repair_moto_state(d: _Deployed) -> None:
    """Make moto's deployed state what AWS would hold (see the module docstring)."""
    iam, lam = d.client("iam"), d.client("lambda")
    for logical_id, resource in d.template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            role = d.physical_ids[logical_id]
            for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
                document = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
                document = _as_dict(document)
                statements = document["Statement"]
                if isinstance(statements, list):
                    document["Statement"] = [s for s in statements if s is not None]
                iam.put_role_policy(RoleName=role, PolicyName=name, PolicyDocument=json.dumps(document))
        elif resource["Type"] == "AWS::S3::Bucket" and resource["Properties"].get("ObjectLockEnabled"):
            _lock_bucket(d, d.physical_ids[logical_id], resource["Properties"])
        elif resource["Type"] == "AWS::Lambda::Function":
            name = d.physical_ids[logical_id]
            env = lam.get_function_configuration(FunctionName=name).get("Environment", {}).get("Variables", {})
            if any(not isinstance(v, str) for v in env.values()):
                strings = {k: str(v) for k, v in env.items()}
                lam.update_function_configuration(FunctionName=name, Environment={"Variables": strings})


def _lock_bucket(d: _Deployed, bucket: str, props: Mapping[str, Any]) -> None:
    """Versioning, then the Object Lock configuration (the default retention), as the template declares them."""
    s3 = d.client("s3")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration=props["VersioningConfiguration"])
    config = copy.deepcopy(props["ObjectLockConfiguration"])
    retention = config.get("Rule", {}).get("DefaultRetention", {})
    for unit in ("Days", "Years"):
        if isinstance(retention.get(unit), dict):  # {"Ref": <parameter>}: the parameter's deployed value
            name = retention[unit]["Ref"]
            retention[unit] = int(d.parameters.get(name, d.template["Parameters"][name].get("Default", 0)))
    s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=config)


def _recreate_state_machines(d: _Deployed) -> None:
    """Create each state machine again from its ASL file, executable and under the same ARN."""
    sfn, iam, lam = d.client("stepfunctions"), d.client("iam"), d.client("lambda")
    physical_ids = d.physical_ids
    arns = {
        logical_id: lam.get_function(FunctionName=physical_ids[logical_id])["Configuration"]["FunctionArn"]
        for logical_id, resource in d.template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
    }
    for logical_id, resource in d.template["Resources"].items():
        if resource["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        props = resource["Properties"]
        definition = (d.base_dir / d.sam_template["Resources"][logical_id]["Properties"]["DefinitionUri"]).read_text()
        for key, value in props.get("DefinitionSubstitutions", {}).items():
            definition = definition.replace("${" + key + "}", _resolve(value, physical_ids, arns))
        role = props["RoleArn"]
        if isinstance(role, dict):  # {"Fn::GetAtt": [<role>, "Arn"]}, the role SAM made for it
            role = iam.get_role(RoleName=physical_ids[role["Fn::GetAtt"][0]])["Role"]["Arn"]
        arn = physical_ids[logical_id]
        sfn.delete_state_machine(stateMachineArn=arn)  # CloudFormation's, if the API sees it at all
        created = sfn.create_state_machine(
            name=arn.rsplit(":", 1)[1],
            definition=definition,
            roleArn=role,
            type=props.get("StateMachineType", "STANDARD"),
            tags=[{"key": t["Key"], "value": t["Value"]} for t in props.get("Tags", [])],
        )
        if created["stateMachineArn"] != arn:
            raise RuntimeError(f"{logical_id}: created {created['stateMachineArn']}, the stack has {arn}")


def _resolve(value: Any, physical_ids: Mapping[str, str], arns: Mapping[str, str] | None = None) -> str:
    """A DefinitionSubstitutions value: a string, a Ref to a deployed resource, or a function's
    ``Fn::GetAtt <id>.Arn`` (``arns``: logical id -> the deployed function's ARN)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in physical_ids:
        return physical_ids[value["Ref"]]
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        target, attribute = value["Fn::GetAtt"]
        if attribute == "Arn" and target in (arns or {}):
            return (arns or {})[target]
    raise ValueError(f"devstack cannot resolve the substitution {value!r}")


def _as_dict(document: Any) -> dict[str, Any]:
    """A policy document as moto returns it: a dict, JSON, or the ``repr`` of a dict."""
    if isinstance(document, dict):
        return document
    try:
        return dict(json.loads(document))
    except ValueError:
        return dict(ast.literal_eval(document))


def _wait_for_create(cfn: Any, stack_name: str, timeout_seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_seconds
    while True:
        description: dict[str, Any] = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
        status = description["StackStatus"]
        if status == "CREATE_COMPLETE":
            return description
        if not status.endswith("IN_PROGRESS") or time.monotonic() > deadline:
            events = cfn.describe_stack_events(StackName=stack_name)["StackEvents"]
            reasons = [
                f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}"
                for e in events
                if e.get("ResourceStatusReason")
            ]
            raise RuntimeError(f"stack {stack_name} is {status}: {reasons}")
        time.sleep(0.2)
