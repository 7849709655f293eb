"""A Sweep's plan: its slots in Harbor's order (attempts x tasks x agents, spec §e.2) and the
Trial each slot runs as, named from a hash of (sweep, task, agent, attempt) so that creating
the same slot twice is a 409, never a duplicate. Pure and deterministic."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipyard.api.models import API_VERSION, AgentSpec
from shipyard.api.sweep import SweepAgent, SweepSpec

DOMAIN = "shipyard.dev"
LABEL_SWEEP = f"{DOMAIN}/sweep"
LABEL_TASK = f"{DOMAIN}/task"
LABEL_AGENT = f"{DOMAIN}/agent"
LABEL_ATTEMPT = f"{DOMAIN}/attempt"
LABEL_RETRY = f"{DOMAIN}/retry"
"""The retry generation of a plan slot: 0 for its first Trial, n for its n-th retry."""
ANNOTATION_AGENT_KEY = f"{DOMAIN}/agent-key"
ANNOTATION_MODEL = f"{DOMAIN}/model"
ANNOTATION_DATASET = f"{DOMAIN}/dataset"
MODEL_ENV = "SHIPYARD_MODEL"
TRIAL_AGENT_FIELDS = frozenset(AgentSpec.model_fields)
MAX_PREFIX = 40
MAX_LABEL = 63


def label_value(value: str) -> str:
    """A valid label value (at most 63 characters), shortened with a hash when needed."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", value).strip("_.-") or "x"
    if len(value) <= MAX_LABEL:
        return value
    return f"{value[:54].rstrip('-._')}-{hashlib.sha256(value.encode()).hexdigest()[:8]}"


def agent_key(agent: SweepAgent) -> str:
    """How an agent is named in eval keys and Trial names: `name`, or `name__model`."""
    return f"{agent.name}__{agent.model}" if agent.model else agent.name


def eval_key(agent: str, model: str | None, dataset: str) -> str:
    """Harbor's `JobStats.format_agent_evals_key`."""
    return f"{agent}__{model}__{dataset}" if model else f"{agent}__{dataset}"


def dataset_name(sweep_name: str, spec: SweepSpec) -> str:
    return spec.dataset or sweep_name


@dataclass(frozen=True)
class Slot:
    """One planned trial: its index in Harbor's order, task, agent (index into spec.agents)
    and attempt (1-based)."""

    index: int
    attempt: int
    task: str
    agent: int
    agent_key: str

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.task, self.agent_key, self.attempt)


def expand(tasks: Sequence[str], spec: SweepSpec) -> list[Slot]:
    """Harbor's order: `for attempt in attempts for task in tasks for agent in agents`."""
    keys = [agent_key(a) for a in spec.agents]
    slots = []
    for attempt in range(1, spec.attempts + 1):
        for task in tasks:
            for i, key in enumerate(keys):
                slots.append(Slot(len(slots), attempt, task, i, key))
    return slots


def duplicate_agents(spec: SweepSpec) -> list[str]:
    """Agent keys that appear more than once (their trials could not be told apart)."""
    keys = [agent_key(a) for a in spec.agents]
    return sorted({k for k in keys if keys.count(k) > 1})


def trial_name(sweep: str, slot: Slot, generation: int = 0) -> str:
    """`<sweep>-<10 hex of sha256(sweep, task, agent, attempt)>`, `-r<n>` for the n-th retry."""
    digest = hashlib.sha256(
        "\0".join((sweep, slot.task, slot.agent_key, str(slot.attempt))).encode()
    ).hexdigest()[:10]
    prefix = sweep[:MAX_PREFIX].rstrip("-.")
    return f"{prefix}-{digest}" + (f"-r{generation}" if generation else "")


def sweep_selector(sweep: str) -> str:
    """The label selector of a Sweep's Trials."""
    return f"{LABEL_SWEEP}={label_value(sweep)}"


def owner_reference(sweep: Mapping[str, Any]) -> dict[str, Any]:
    meta = sweep["metadata"]
    return {"apiVersion": API_VERSION, "kind": "Sweep", "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def trial_body(sweep: Mapping[str, Any], spec: SweepSpec, slot: Slot, generation: int = 0
               ) -> dict[str, Any]:
    """The Trial of a slot: the template's spec with the slot's task and agent, labelled with
    the sweep, task, agent, attempt and retry generation, owned by the Sweep."""
    name = sweep["metadata"]["name"]
    agent = spec.agents[slot.agent]
    # The model goes to the Trial's agent when Trials know models (installed agents), and
    # always to the agent's environment as SHIPYARD_MODEL (a command agent reads it there).
    sweep_only = {"parallelism"} | ({"model"} if "model" not in TRIAL_AGENT_FIELDS else set())
    agent_spec = agent.model_dump(by_alias=True, exclude_defaults=True, exclude=sweep_only,
                                  mode="json")
    agent_spec["name"] = agent.name
    if agent.model and not any(e.name == MODEL_ENV for e in agent.env):
        agent_spec["env"] = [*agent_spec.get("env", []), {"name": MODEL_ENV,
                                                           "value": agent.model}]
    trial_spec = spec.trial_template.model_dump(by_alias=True, exclude_defaults=True,
                                                mode="json")
    annotations = {ANNOTATION_AGENT_KEY: slot.agent_key,
                   ANNOTATION_DATASET: dataset_name(name, spec)}
    if agent.model:
        annotations[ANNOTATION_MODEL] = agent.model
    return {
        "apiVersion": API_VERSION,
        "kind": "Trial",
        "metadata": {
            "name": trial_name(name, slot, generation),
            "namespace": sweep["metadata"].get("namespace"),
            "labels": {
                "app.kubernetes.io/managed-by": "shipyard",
                LABEL_SWEEP: label_value(name),
                LABEL_TASK: label_value(slot.task),
                LABEL_AGENT: label_value(slot.agent_key),
                LABEL_ATTEMPT: str(slot.attempt),
                LABEL_RETRY: str(generation),
            },
            "annotations": annotations,
            "ownerReferences": [owner_reference(sweep)],
        },
        "spec": {**trial_spec, "taskRef": {"name": slot.task}, "agent": agent_spec},
    }
