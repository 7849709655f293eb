"""A Sweep's plan: its slots in Harbor's order (attempts x tasks x agents, docs/harbor.md §e.2) and
the Trial each slot runs as, named from a hash of (sweep, task, agent, attempt) so that creating
the same slot twice is a 409, never a duplicate. Pure and deterministic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipyard.api.conventions import (
    ANNOTATION_AGENT_KEY,
    ANNOTATION_DATASET,
    KUEUE_LABELS,
    LABEL_AGENT,
    LABEL_ATTEMPT,
    LABEL_RETRY,
    LABEL_TASK,
    MANAGED_BY,
    MODEL_ENV,
    label_value,
    sweep_selector,
    sweep_trial_name,
)
from shipyard.api.models import API_VERSION
from shipyard.api.sweep import MAX_TRIALS, SweepAgent, SweepSpec
from shipyard.plan.agents import bare_model


def agent_key(agent: SweepAgent) -> str:
    """How an agent is named in eval keys and Trial names: `name`, or `name__model`."""
    return f"{agent.name}__{agent.model}" if agent.model else agent.name


def eval_key(agent: str, model: str | None, dataset: str) -> str:
    """Harbor's `JobStats.format_agent_evals_key`: the model by its name without the provider
    (Harbor's `ModelInfo.name`)."""
    return f"{agent}__{bare_model(model)}__{dataset}" if model else f"{agent}__{dataset}"


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


def oversized(n_tasks: int, spec: SweepSpec) -> str | None:
    """Why the plan is too large to hold (None: it is not)."""
    planned = spec.attempts * n_tasks * len(spec.agents)
    if planned <= MAX_TRIALS:
        return None
    return (f"spec: {spec.attempts:,} attempts x {n_tasks:,} tasks x {len(spec.agents):,} "
            f"agents is {planned:,} trials: more than the {MAX_TRIALS:,} one Sweep may plan; "
            "split it into several Sweeps")


def expand(tasks: Sequence[str], spec: SweepSpec) -> list[Slot]:
    """Harbor's order: `for attempt in attempts for task in tasks for agent in agents`. An
    oversized plan has no slots (`oversized` says why)."""
    if oversized(len(tasks), spec):
        return []
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
    return sweep_trial_name(sweep, slot.task, slot.agent_key, slot.attempt, generation)


def owner_reference(sweep: Mapping[str, Any]) -> dict[str, Any]:
    meta = sweep["metadata"]
    return {"apiVersion": API_VERSION, "kind": "Sweep", "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def kueue_labels(sweep: Mapping[str, Any]) -> dict[str, str]:
    """Kueue's queue name and priority class, passed from the Sweep to its Trials."""
    labels = (sweep.get("metadata") or {}).get("labels") or {}
    return {k: labels[k] for k in KUEUE_LABELS if labels.get(k)}


def trial_body(sweep: Mapping[str, Any], spec: SweepSpec, slot: Slot, generation: int = 0
               ) -> dict[str, Any]:
    """The Trial of a slot: the template's spec with the slot's task and agent, labelled with
    the sweep, task, agent, attempt and retry generation, owned by the Sweep."""
    name = sweep["metadata"]["name"]
    agent = spec.agents[slot.agent]
    # The model is the Trial agent's model (installed agents) and, for a command agent, in
    # its environment as SHIPYARD_MODEL.
    agent_spec = agent.model_dump(by_alias=True, exclude_defaults=True,
                                  exclude={"parallelism"}, mode="json")
    agent_spec["name"] = agent.name
    if agent.model and not any(e.name == MODEL_ENV for e in agent.env):
        agent_spec["env"] = [*agent_spec.get("env", []), {"name": MODEL_ENV,
                                                           "value": agent.model}]
    trial_spec = spec.trial_template.model_dump(by_alias=True, exclude_defaults=True,
                                                mode="json")
    annotations = {ANNOTATION_AGENT_KEY: slot.agent_key,
                   ANNOTATION_DATASET: dataset_name(name, spec)}
    return {
        "apiVersion": API_VERSION,
        "kind": "Trial",
        "metadata": {
            "name": trial_name(name, slot, generation),
            "namespace": sweep["metadata"].get("namespace"),
            "labels": {
                **MANAGED_BY,
                **sweep_selector(name),
                LABEL_TASK: label_value(slot.task),
                LABEL_AGENT: label_value(slot.agent_key),
                LABEL_ATTEMPT: str(slot.attempt),
                LABEL_RETRY: str(generation),
                **kueue_labels(sweep),
            },
            "annotations": annotations,
            "ownerReferences": [owner_reference(sweep)],
        },
        "spec": {**trial_spec, "taskRef": {"name": slot.task}, "agent": agent_spec},
    }
