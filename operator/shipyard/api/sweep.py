"""The Sweep custom resource: many Trials (attempts x tasks x agents, in Harbor's order) with
Harbor's job metrics in its status. The CRD schema is generated from these models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, create_model

from shipyard.api.models import AgentSpec, Condition, Model, TrialSpec

# ---------------------------------------------------------------- spec


class LabelSelectorRequirement(Model):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class LabelSelector(Model):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class SweepTasks(Model):
    """Which Tasks run: the names listed and every Task the selector matches (a dataset is a
    set of Tasks sharing a label). Evaluated on every reconcile."""

    names: list[str] = Field(default=[], description="Task names in this namespace.")
    selector: LabelSelector | None = Field(
        default=None, description="Tasks whose labels match (e.g. matchLabels {dataset: tb2}).")


class SweepAgent(AgentSpec):
    """A Trial agent and its own concurrency limit. Its `model` is part of the eval key
    (agent__model__dataset, as Harbor) and reaches a `command` agent as SHIPYARD_MODEL."""

    parallelism: int | None = Field(
        default=None, ge=1, description="Non-terminal Trials of this agent at once "
        "(Harbor's per-agent n_concurrent).")


def _template_model() -> type[Model]:
    """Everything a Trial spec has except taskRef and agent, derived from TrialSpec so that new
    Trial fields reach sweeps without a second list to keep in step."""
    fields: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in TrialSpec.model_fields.items()
        if name not in ("task_ref", "agent")
    }
    return create_model("TrialTemplate", __base__=Model, **fields)


TrialTemplate = _template_model()
TrialTemplate.__doc__ = "A Trial spec without taskRef and agent: applied to every Trial."

MetricType = Literal["mean", "sum", "min", "max"]


class MetricSpec(Model):
    type: MetricType = "mean"


MAX_TRIALS = 100_000
"""Trials one Sweep may plan (attempts x tasks x agents): its slots are held in the operator's
memory and walked on every pass. Past it the Sweep fails `TooManyTrials`, creating none."""


class SweepSpec(Model):
    tasks: SweepTasks
    agents: list[SweepAgent] = Field(min_length=1, max_length=1000)
    attempts: int = Field(default=1, ge=1, le=MAX_TRIALS, description="Trials per task and agent.")
    dataset: str | None = Field(
        default=None, description="Dataset name in the eval keys (Harbor's trial source); "
        "default: the Sweep's name.")
    parallelism: int = Field(default=4, ge=1, description="Non-terminal Trials at once.")
    per_task_parallelism: int | None = Field(
        default=None, ge=1,
        description="Non-terminal Trials of one task at once (1 serializes its attempts).")
    trial_template: TrialTemplate = Field(default_factory=TrialTemplate)  # type: ignore[valid-type]
    suspend: bool = Field(
        default=False, description="As Job.spec.suspend: create no new Trial; running ones "
        "finish.")
    retry_unscored: int = Field(
        default=0, ge=0, le=10,
        description="Rounds of retries for plan slots whose Trial ended without a reward: "
        "each round runs such a slot once more as a new Trial (`shipyard sweep retry` adds "
        "one); the old Trial is kept and left out of the metrics.")
    metrics: list[MetricSpec] = Field(default_factory=lambda: [MetricSpec()])


# ---------------------------------------------------------------- status


class SweepCounts(Model):
    planned: int = 0
    created: int = 0
    pending: int = 0
    queued: int = 0
    """Trials waiting for Kueue's admission (also counted in `pending`)."""
    running: int = 0
    completed: int = 0
    """Plan slots whose current Trial finished (with or without a reward)."""
    failed: int = 0
    """Plan slots whose current Trial finished without a reward."""
    errored: int = 0
    """Plan slots whose current Trial recorded an exception (Harbor's n_errored_trials)."""
    cancelled: int = 0
    retried: int = 0
    """Trials superseded by a retry (kept, left out of the metrics)."""


class EvalStats(Model):
    """Harbor's AgentDatasetStats for one eval key, without the per-trial lists."""

    key: str
    agent: str
    model: str | None = None
    dataset: str
    planned: int = 0
    finished: int = 0
    n_trials: int = 0
    """Finished Trials with rewards (Harbor's n_trials)."""
    n_errors: int = 0
    metrics: list[dict[str, float]] = []
    pass_at_k: dict[str, float] = {}
    exception_counts: dict[str, int] = {}
    n_input_tokens: int | None = None
    n_cache_tokens: int | None = None
    n_output_tokens: int | None = None
    cost_usd: float | None = None


class SweepStatus(Model):
    observed_generation: int | None = None
    conditions: list[Condition] = []
    progress: str | None = None
    """`finished/planned`, for `kubectl get sweeps`."""
    mean: float | None = None
    """The mean reward over every finished slot (missing = 0); null unless single-key."""
    counts: SweepCounts = SweepCounts()
    completed_indexes: str = ""
    """Plan indexes (Harbor's order) whose current Trial finished, as Job-style ranges."""
    failed_indexes: str = ""
    """Plan indexes whose current Trial finished without a reward."""
    evals: list[EvalStats] = []
    n_input_tokens: int | None = None
    n_cache_tokens: int | None = None
    n_output_tokens: int | None = None
    cost_usd: float | None = None
    start_time: str | None = None
    completion_time: str | None = None
