"""CustomResourceDefinitions generated from the pydantic models (written to crds/ by
`python -m shipyard.api.crds`; CI checks that crds/ matches)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from shipyard.api.models import (
    GROUP,
    VERSION,
    ImageBuildSpec,
    ImageBuildStatus,
    TaskSpec,
    TaskStatus,
    TrialSpec,
    TrialStatus,
    WarmPoolSpec,
    WarmPoolStatus,
)
from shipyard.api.sweep import SweepSpec, SweepStatus

DROP_KEYS = {"title", "discriminator"}


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema made structural: refs inlined, Optional as nullable, no titles."""
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = dict(defs[node["$ref"].split("/")[-1]])
            extra = {k: v for k, v in node.items() if k != "$ref"}
            return convert({**target, **extra})
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            nullable = len(options) < len(node["anyOf"])
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            # One real option (X | None); for unions of scalars the first option's type wins.
            merged = convert({**options[0], **rest})
            if nullable:
                merged["nullable"] = True
                if merged.get("default", 0) is None:
                    merged.pop("default")
            return merged
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in DROP_KEYS:
                continue
            if key == "default" and isinstance(value, dict):
                continue  # nested-object defaults are the models' business, not the API's
            if key == "const":
                out["enum"] = [value]
                continue
            if key in ("exclusiveMinimum", "exclusiveMaximum"):  # JSON Schema → OpenAPI v3
                out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
                out[key] = True
                continue
            if key == "properties":
                out[key] = {name: convert(v) for name, v in value.items()}
            else:
                out[key] = convert(value)
        if out.get("type") == "object" and "properties" not in out:
            out.setdefault("additionalProperties", {})
            if out["additionalProperties"] in (True, {}):
                out["x-kubernetes-preserve-unknown-fields"] = True
                out.pop("additionalProperties")
        if out.get("additionalProperties") is False:
            out.pop("additionalProperties")
        return out

    return convert(raw)


def _crd(
    kind: str,
    plural: str,
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict[str, str]],
    short: list[str],
    immutable_spec: bool = False,
) -> dict[str, Any]:
    spec_schema = structural_schema(spec)
    if immutable_spec:
        spec_schema["x-kubernetes-validations"] = [
            {"rule": "self == oldSelf", "message": "spec is immutable: create a new Trial"}
        ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["shipyard"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": structural_schema(status),
                            },
                        }
                    },
                }
            ],
        },
    }


def task_crd() -> dict[str, Any]:
    return _crd(
        "Task",
        "tasks",
        TaskSpec,
        TaskStatus,
        [
            {"name": "Ready", "type": "string",
             "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
            {"name": "Images", "type": "string",
             "jsonPath": ".status.conditions[?(@.type=='ImagesReady')].reason"},
            {"name": "Steps", "type": "integer", "jsonPath": ".status.summary.steps"},
            {"name": "Verifier", "type": "string", "jsonPath": ".status.summary.verifierMode"},
            {"name": "Image", "type": "string", "jsonPath": ".status.summary.image",
             "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        ["sytask"],
    )


def trial_crd() -> dict[str, Any]:
    return _crd(
        "Trial",
        "trials",
        TrialSpec,
        TrialStatus,
        [
            {"name": "Task", "type": "string", "jsonPath": ".spec.taskRef.name"},
            {"name": "Agent", "type": "string", "jsonPath": ".spec.agent.name"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Reward", "type": "number", "jsonPath": ".status.reward"},
            {"name": "Current", "type": "string", "jsonPath": ".status.currentPhase"},
            {"name": "Reason", "type": "string",  # why it failed, in the default view
             "jsonPath": ".status.conditions[?(@.status=='True')].reason"},
            {"name": "Model", "type": "string", "priority": 1, "jsonPath": ".spec.agent.model"},
            {"name": "Cost", "type": "number", "priority": 1,
             "jsonPath": ".status.agentResult.costUsd"},
            {"name": "Queue", "type": "string", "priority": 1,  # Kueue's LocalQueue
             "jsonPath": ".status.queue.name"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        [],
        immutable_spec=True,
    )


def image_build_crd() -> dict[str, Any]:
    return _crd(
        "ImageBuild",
        "imagebuilds",
        ImageBuildSpec,
        ImageBuildStatus,
        [
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Source", "type": "string", "jsonPath": ".status.source"},
            {"name": "Ref", "type": "string", "jsonPath": ".spec.ref"},
            {"name": "Reason", "type": "string", "priority": 1, "jsonPath": ".status.reason"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        ["syib"],
    )


def sweep_crd() -> dict[str, Any]:
    return _crd(
        "Sweep",
        "sweeps",
        SweepSpec,
        SweepStatus,
        [
            {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
            {"name": "Running", "type": "integer", "jsonPath": ".status.counts.running"},
            {"name": "Errors", "type": "integer", "jsonPath": ".status.counts.errored"},
            {"name": "Mean", "type": "number", "jsonPath": ".status.mean"},
            {"name": "Complete", "type": "string",
             "jsonPath": ".status.conditions[?(@.type=='Complete')].status"},
            {"name": "Cost", "type": "number", "priority": 1, "jsonPath": ".status.costUsd"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        [],
    )


def warm_pool_crd() -> dict[str, Any]:
    return _crd(
        "WarmPool",
        "warmpools",
        WarmPoolSpec,
        WarmPoolStatus,
        [
            {"name": "Task", "type": "string", "jsonPath": ".spec.taskRef.name"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.ready"},
            {"name": "Starting", "type": "integer", "jsonPath": ".status.starting"},
            {"name": "Claimed", "type": "integer", "jsonPath": ".status.claimed"},
            {"name": "Reason", "type": "string",
             "jsonPath": ".status.conditions[?(@.type=='Ready')].reason"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        ["sywp"],
    )


def all_crds() -> dict[str, dict[str, Any]]:
    """File name in crds/ → CRD manifest."""
    return {"tasks.shipyard.dev.yaml": task_crd(), "trials.shipyard.dev.yaml": trial_crd(),
            "imagebuilds.shipyard.dev.yaml": image_build_crd(),
            "sweeps.shipyard.dev.yaml": sweep_crd(),
            "warmpools.shipyard.dev.yaml": warm_pool_crd()}


def render(crd: dict[str, Any]) -> str:
    header = "# Generated from shipyard.api.models by `python -m shipyard.api.crds`. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False)


def main(argv: list[str]) -> int:
    """`python -m shipyard.api.crds [--check] [DIR]`: write crds/, or check it is current."""
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    out = Path(args[0] if args else "crds")
    stale = []
    for name, crd in all_crds().items():
        path = out / name
        text = render(crd)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("crds/ is out of date with shipyard.api.models; run "
              "`python -m shipyard.api.crds`: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
