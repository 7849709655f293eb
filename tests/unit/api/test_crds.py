"""CRDs generated from the pydantic models: structural, printable, and committed up to date."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from shipyard.api import crds
from shipyard.api.models import TaskSpec, TaskStatus, TrialSpec, TrialStatus
from tests.unit.helpers import REPO

CRDS = {"Task": crds.task_crd(), "Trial": crds.trial_crd()}


def version(crd: dict[str, Any]) -> dict[str, Any]:
    (only,) = crd["spec"]["versions"]
    return only


def root_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return version(crd)["schema"]["openAPIV3Schema"]


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, schema node) below `node`, including itself."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def schema_nodes(crd: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Schema nodes only (not the values of `default`, `enum` or `properties` maps)."""
    def visit(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        yield path, node
        for name, child in (node.get("properties") or {}).items():
            yield from visit(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield from visit(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from visit(node["additionalProperties"], f"{path}{{}}")

    yield from visit(root_schema(crd), "")


def resolve(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.strip(".").split("."):
        node = node["properties"][part]
    return node


# ---------------------------------------------------------------- structural schemas


@pytest.mark.parametrize("kind", CRDS)
def test_schema_has_no_refs_anyof_or_titles(kind: str) -> None:
    offending = [
        f"{path}: {key}"
        for path, node in walk(root_schema(CRDS[kind]))
        for key in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "discriminator", "const")
        if key in node and not path.endswith("/properties")  # a field may be *named* title
    ]
    assert offending == []


@pytest.mark.parametrize("kind", CRDS)
def test_every_schema_node_has_a_type(kind: str) -> None:
    untyped = [path for path, node in schema_nodes(CRDS[kind]) if "type" not in node]
    assert untyped == []


@pytest.mark.parametrize("kind", CRDS)
def test_every_object_specifies_its_fields(kind: str) -> None:
    """properties, a map's value schema, or explicitly preserved unknown fields; the root
    metadata is the one object Kubernetes fills in itself."""
    vague = [
        path
        for path, node in schema_nodes(CRDS[kind])
        if node.get("type") == "object"
        and path != ".metadata"
        and "properties" not in node
        and not isinstance(node.get("additionalProperties"), dict)
        and node.get("x-kubernetes-preserve-unknown-fields") is not True
    ]
    assert vague == []


@pytest.mark.parametrize("kind", CRDS)
def test_no_boolean_additional_properties(kind: str) -> None:
    """`additionalProperties: false/true` is not allowed in a structural schema."""
    booleans = [
        path for path, node in schema_nodes(CRDS[kind])
        if isinstance(node.get("additionalProperties"), bool)
    ]
    assert booleans == []


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Trial", "spec.agent.command"),
        ("Trial", "spec.agent.overrideTimeoutSec"),
        ("Trial", "spec.environment.image"),
        ("Trial", "spec.environment.imagePullPolicy"),
        ("Trial", "spec.ttlSecondsAfterFinished"),
        ("Trial", "status.reward"),
        ("Trial", "status.rewards"),
        ("Trial", "status.error"),
        ("Trial", "status.podName"),
        ("Task", "status.digest"),
        ("Task", "status.summary"),
        ("Task", "spec.source.inline"),
    ],
)
def test_optional_fields_are_nullable_without_a_null_default(kind: str, path: str) -> None:
    node = resolve(root_schema(CRDS[kind]), path)
    assert node.get("nullable") is True
    assert "default" not in node or node["default"] is not None


def test_required_fields_are_not_nullable() -> None:
    schema = root_schema(CRDS["Trial"])
    assert "nullable" not in resolve(schema, "spec.taskRef")
    assert "nullable" not in resolve(schema, "spec.taskRef.name")
    assert resolve(schema, "spec")["required"] == ["taskRef"]


def test_exclusive_minimum_uses_the_openapi_v3_boolean_form() -> None:
    node = resolve(root_schema(CRDS["Trial"]), "spec.timeoutMultiplier")
    assert (node["minimum"], node["exclusiveMinimum"]) == (0, True)
    for path, schema in schema_nodes(CRDS["Trial"]):
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in schema:
                assert schema[key] is True, path


def test_inclusive_minimum_stays_plain() -> None:
    node = resolve(root_schema(CRDS["Trial"]), "spec.ttlSecondsAfterFinished")
    assert node["minimum"] == 0
    assert "exclusiveMinimum" not in node


def test_literals_become_enums() -> None:
    schema = root_schema(CRDS["Trial"])
    assert resolve(schema, "spec.agent.name")["enum"][:4] == [
        "oracle", "nop", "command", "claude-code"]
    assert resolve(schema, "status.phase")["enum"] == [
        "Pending", "Queued", "Running", "Completed", "Failed"]


def test_camel_case_field_names() -> None:
    spec = resolve(root_schema(CRDS["Trial"]), "spec")
    assert {"taskRef", "timeoutMultiplier", "keepPods", "ttlSecondsAfterFinished"} <= set(
        spec["properties"]
    )
    assert not [name for name in spec["properties"] if "_" in name]


# ---------------------------------------------------------------- names, columns, subresources


@pytest.mark.parametrize("kind", CRDS)
def test_namespaced_in_the_shipyard_category_with_status_subresource(kind: str) -> None:
    crd = CRDS[kind]
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == f"{names['plural']}.shipyard.dev"
    assert crd["spec"]["scope"] == "Namespaced"
    assert names["kind"] == kind
    assert "shipyard" in names["categories"]
    assert version(crd)["name"] == "v1alpha1"
    assert version(crd)["subresources"] == {"status": {}}
    assert version(crd)["served"] and version(crd)["storage"]


def test_trial_printer_columns() -> None:
    columns = {c["name"]: c for c in version(CRDS["Trial"])["additionalPrinterColumns"]}
    assert {"Task", "Agent", "Phase", "Reward", "Age"} <= set(columns)
    assert columns["Task"]["jsonPath"] == ".spec.taskRef.name"
    assert columns["Agent"]["jsonPath"] == ".spec.agent.name"
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert (columns["Reward"]["jsonPath"], columns["Reward"]["type"]) == (".status.reward",
                                                                          "number")
    assert (columns["Age"]["jsonPath"], columns["Age"]["type"]) == (
        ".metadata.creationTimestamp", "date")


@pytest.mark.parametrize("kind", CRDS)
def test_printer_columns_point_at_fields_of_the_schema(kind: str) -> None:
    schema = root_schema(CRDS[kind])
    for column in version(CRDS[kind])["additionalPrinterColumns"]:
        path = column["jsonPath"].split("[")[0]
        if path.startswith(".metadata."):
            continue
        resolve(schema, path)  # raises KeyError when the column shows nothing


# ---------------------------------------------------------------- committed crds/


def test_committed_crds_are_up_to_date(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert crds.main(["--check", "crds"]) == 0


def test_check_reports_a_stale_crd(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crds.main([str(tmp_path)]) == 0
    assert crds.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "trials.shipyard.dev.yaml").write_text("stale\n")
    assert crds.main(["--check", str(tmp_path)]) == 1
    assert "trials.shipyard.dev.yaml" in capsys.readouterr().err


def _committed_schema(plural: str) -> dict[str, Any]:
    text = (REPO / "crds" / f"{plural}.shipyard.dev.yaml").read_text()
    return root_schema(yaml.safe_load(text))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _missing_fields(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[str]:
    """Fields of `model` (by their camelCase alias) that `schema` would prune."""
    missing = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        node = schema.get("properties", {}).get(key)
        if node is None:
            missing.append(f"{path}.{key}")
            continue
        while node.get("type") == "array" or isinstance(node.get("additionalProperties"), dict):
            node = node["items"] if node.get("type") == "array" else node["additionalProperties"]
        for nested in _models_in(info.annotation):
            missing += _missing_fields(nested, node, f"{path}.{key}")
    return missing


@pytest.mark.parametrize(
    ("plural", "spec", "status"),
    [("tasks", TaskSpec, TaskStatus), ("trials", TrialSpec, TrialStatus)],
)
def test_committed_crds_keep_every_field_of_the_models(plural: str, spec: type[BaseModel],
                                                       status: type[BaseModel]) -> None:
    """A field missing from the installed schema is silently pruned by the apiserver: a
    restarted operator would not see it (e.g. that a phase was already launched)."""
    schema = _committed_schema(plural)["properties"]
    assert _missing_fields(spec, schema["spec"], ".spec") == []
    assert _missing_fields(status, schema["status"], ".status") == []


def test_committed_trial_crd_keeps_a_phase_s_launched_flag() -> None:
    phases = _committed_schema("trials")["properties"]["status"]["properties"]["phases"]
    assert "launched" in phases["items"]["properties"]


def test_rendered_file_carries_the_do_not_edit_header() -> None:
    text = crds.render(CRDS["Task"])
    assert text.startswith("# Generated from shipyard.api.models")
    assert yaml.safe_load(text) == CRDS["Task"]
