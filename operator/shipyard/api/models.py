"""The Task and Trial custom resources, as pydantic models (CRD schemas are generated from them).

Field names follow Kubernetes conventions (camelCase on the wire); the Harbor files inside a Task
keep Harbor's own names.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from shipyard.agents import BUILT_IN_AGENTS, INSTALLED_AGENTS
from shipyard.taskformat.envtemplates import MAX_ENV_VAR_BYTES, env_var_problem

GROUP = "shipyard.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# ---------------------------------------------------------------- shared


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class LocalObjectReference(Model):
    name: str = Field(min_length=1)


# ---------------------------------------------------------------- Task


class InlineSource(Model):
    files: dict[str, str] = Field(
        description="Task files by relative path (task.toml, instruction.md, tests/test.sh, ...)."
    )


class ConfigMapSource(Model):
    name: str = Field(min_length=1, description="ConfigMap holding the task bundle.")
    parts: int | None = Field(
        default=None, ge=1, le=64,
        description="A bundle larger than one ConfigMap (1 MiB) is split into ConfigMaps "
        "<name>-0 ... <name>-<parts-1>, read and joined in order.")


class TaskSource(Model):
    inline: InlineSource | None = None
    config_map: ConfigMapSource | None = None


class TaskSpec(Model):
    source: TaskSource
    force_build: bool = Field(
        default=False,
        description="Build the images from the task's Dockerfiles even when the task names a "
        "prebuilt docker_image or the registry already has the tag (Harbor's force_build).",
    )


class TaskSummary(Model):
    steps: int = 1
    verifier_mode: str = "shared"
    image: str | None = None
    network: str = "public"


ImageSource = Literal["prebuilt", "built", "cached"]


class ImageStatus(Model):
    """One image of the task, by role (`environment`, `verifier`, `verifier.<step>`)."""

    ref: str
    digest: str | None = None
    context_hash: str | None = Field(
        default=None, description="Harbor's environment_id of the build context.")
    source: ImageSource | None = Field(
        default=None, description="prebuilt (docker_image), built (by this cluster's builder) "
        "or cached (the registry had the tag already); empty while building.")
    build: str | None = Field(default=None, description="The ImageBuild that makes it.")


class TaskStatus(Model):
    observed_generation: int | None = None
    conditions: list[Condition] = []
    digest: str | None = None
    summary: TaskSummary | None = None
    images: dict[str, ImageStatus] = {}
    validated: str | None = Field(
        default=None, description="What the verdict in Ready was reached on: a hash of the "
        "spec (whose bundle ConfigMap names are content-addressed), the operator's version "
        "and the settings validation reads. An operator that starts finds it unchanged and "
        "does not load and validate the task again.")


# ---------------------------------------------------------------- ImageBuild

IMAGES_READY = "ImagesReady"
ImageBuildPhase = Literal["Pending", "Building", "Succeeded", "Failed"]


class ImageBuildSpec(Model):
    """One image built from one context, shared by every Task whose context hashes the same
    (each is a non-controller owner; the build goes with the last of them)."""

    ref: str = Field(min_length=1, description="Where the image is pushed: repository:tag.")
    context_hash: str = Field(min_length=1)
    context_config_map: str = Field(
        min_length=1, description="ConfigMap holding the build context as context.tar.gz.")
    context_parts: int | None = Field(
        default=None, ge=1, description="A context larger than one ConfigMap is split into "
        "<contextConfigMap>-0 ... -<parts-1>, joined in order.")
    cache_ref: str | None = Field(default=None, description="Registry cache (buildctl "
                                  "--export-cache/--import-cache type=registry).")
    timeout_sec: float = Field(default=600.0, gt=0, description="[environment]."
                               "build_timeout_sec: the build Job's activeDeadlineSeconds.")
    force: bool = Field(default=False, description="Build even when the registry has the tag.")


class ImageBuildStatus(Model):
    phase: ImageBuildPhase = "Pending"
    reason: str | None = None
    message: str | None = None
    digest: str | None = None
    source: ImageSource | None = None
    job_name: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


# ---------------------------------------------------------------- Trial

AgentName = Literal[(*BUILT_IN_AGENTS, *INSTALLED_AGENTS)]  # type: ignore[valid-type]
"""oracle, nop, command, then Harbor's installed agents, one module each in `shipyard.agents`."""


class EnvVar(Model):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str = Field(default="", max_length=MAX_ENV_VAR_BYTES)

    @model_validator(mode="after")
    def _startable(self) -> EnvVar:
        if (problem := env_var_problem(self.name, self.value)) is not None:
            raise ValueError(f"{self.name}: {problem}")
        return self


class SecretEnvSource(Model):
    secret_ref: LocalObjectReference


class ModelEndpoint(Model):
    """In-cluster model server pods the agent phase may reach (a ClusterIP `baseURL` is
    rewritten to a pod address by kube-proxy before network policies see it, so such servers
    are allowed by selector, not by address)."""

    pod_selector: dict[str, str] = Field(description="matchLabels of the model server pods.")
    namespace: str | None = Field(
        default=None, description="Their namespace (default: the Trial's).")
    port: int | None = Field(default=None, ge=1, le=65535,
                             description="The pods' port (default: any TCP port).")


class AgentSpec(Model):
    name: AgentName = "oracle"
    command: str | None = Field(
        default=None, description="Shell command run as the agent (agent name 'command')."
    )
    version: str | None = Field(
        default=None, description="Installed agents: the agent CLI version (default: the "
        "version Shipyard pins for it).")
    model: str | None = Field(
        default=None, description="Installed agents: the model, as Harbor's --model "
        "(e.g. anthropic/claude-sonnet-4-5, openai/gpt-5).")
    base_url: str | None = Field(
        default=None, alias="baseURL",
        description="Installed agents: the model endpoint (a gateway or an in-cluster model "
        "server). Its host is allowed for the agent phase only, whatever the task's network.")
    model_endpoint: ModelEndpoint | None = None
    kwargs: dict[str, str] = Field(
        default={}, description="Installed agents: Harbor's agent kwargs (e.g. max_turns, "
        "reasoning_effort), checked against the agent's options.")
    install: Literal["bundle", "script"] = Field(
        default="bundle", description="bundle: the agent's files from a prebuilt bundle "
        "image (no network needed); script: Harbor's install commands in the setup phase, "
        "with egress to the install hosts (refused for no-network tasks).")
    bundle_image: str | None = Field(
        default=None, description="Overrides the agent bundle image (default: the operator's "
        "bundle repository, agent-<name>:<version>).")
    env: list[EnvVar] = []
    env_from: list[SecretEnvSource] = Field(
        default=[],
        description="Secrets whose keys are exported as environment variables for the agent "
        "phase only (mounted as files, never passed on a command line).",
    )
    override_timeout_sec: float | None = Field(default=None, gt=0)
    max_timeout_sec: float | None = Field(default=None, gt=0)


AgentProcesses = Literal["End", "Keep"]


class VerifierSpec(Model):
    override_timeout_sec: float | None = Field(default=None, gt=0)
    max_timeout_sec: float | None = Field(default=None, gt=0)
    env: list[EnvVar] = []
    agent_processes: AgentProcesses = Field(
        default="End",
        description="End: every process a phase started is ended before the next phase "
        "(the tests never run beside the agent's processes). Keep: Harbor's behaviour, for "
        "tasks whose tests check services the agent started; processes that hold one of the "
        "agent's Secret values are still ended.",
    )


class EnvironmentSpec(Model):
    image: str | None = Field(default=None, description="Overrides the task's docker_image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    override_cpus: float | None = Field(default=None, gt=0)
    override_memory_mb: int | None = Field(default=None, gt=0)
    override_storage_mb: int | None = Field(default=None, gt=0)
    env: list[EnvVar] = []
    build_timeout_sec: float | None = Field(
        default=None, gt=0, description="Overrides [environment].build_timeout_sec."
    )
    unschedulable_grace_sec: float | None = Field(
        default=None, gt=0,
        description="How long a pod may stay Unschedulable before the trial fails with "
        "Unschedulable (default: the operator's setting, longer when accelerators are "
        "requested).",
    )


class ExtraAllowedHosts(Model):
    """Run-level allowed hosts, as Harbor's --allow-{environment,agent,verifier}-host."""

    # Merged like Harbor: ignored on a public policy, turning no-network into an allowlist of
    # just these, appended to an allowlist.

    environment: list[str] = Field(default=[], description="Into the environment baseline.")
    agent: list[str] = Field(default=[], description="Into the agent phase.")
    verifier: list[str] = Field(default=[], description="Into the verifier phase and the "
                                                        "separate verifier's baseline.")


class NetworkSpec(Model):
    extra_allowed_hosts: ExtraAllowedHosts = ExtraAllowedHosts()


class Toleration(Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class PodSettings(Model):
    """Pod settings for platform teams, applied to every pod of the trial."""

    node_selector: dict[str, str] = Field(
        default={}, description="Merged over the accelerator node selectors.")
    tolerations: list[Toleration] = Field(
        default=[], description="Added to the accelerator tolerations.")
    priority_class_name: str | None = None
    runtime_class_name: str | None = Field(
        default=None, description="For example gvisor, to sandbox untrusted agents.")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default=[], description="Secrets for pulling the trial's images from a private "
        "registry, added to the operator's (chart value builds.imagePullSecrets).")


class ArtifactSpec(Model):
    """Harbor's artifact table (`{source, destination, exclude}`)."""

    source: str = Field(min_length=1)
    destination: str | None = None
    exclude: list[str] = []


class TrialSpec(Model):
    task_ref: LocalObjectReference
    agent: AgentSpec = AgentSpec()
    verifier: VerifierSpec = VerifierSpec()
    environment: EnvironmentSpec = EnvironmentSpec()
    timeout_multiplier: float = Field(default=1.0, gt=0)
    agent_timeout_multiplier: float | None = Field(default=None, gt=0)
    verifier_timeout_multiplier: float | None = Field(default=None, gt=0)
    keep_pods: bool = Field(default=False, description="Keep the pods after the trial ends.")
    retries: int = Field(
        default=0, ge=0, le=10,
        description="Retries after infrastructure failures only (pod lost or evicted, image "
        "pull errors); each attempt gets a new pod and is kept in status.attempts.",
    )
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    network: NetworkSpec = NetworkSpec()
    pod: PodSettings = PodSettings()
    artifacts: list[ArtifactSpec] = Field(
        default=[],
        description="Run-level artifacts (Harbor's trial `artifacts`), collected after each "
        "verification pass with the task's and the step's.",
    )


TrialPhaseName = Literal["Pending", "Queued", "Running", "Completed", "Failed"]
StepState = Literal["Pending", "Running", "Succeeded", "Failed", "Skipped"]


class PhaseRecord(Model):
    """One phase of the trial as it ran: environment, healthcheck, setup, agent, verifier..."""

    name: str
    id: str | None = None  # unique within the trial; equals name for single-step trials
    step: str | None = None
    state: StepState = "Pending"
    launched: bool = False
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    timed_out: bool | None = None
    message: str | None = None


class TrialError(Model):
    type: str
    message: str


class AgentResult(Model):
    """What an installed agent reported about its own run (parsed from its output)."""

    input_tokens: int | None = None  # including cached input tokens, as Harbor counts them
    cache_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    model: str | None = None
    turns: int | None = None


RewardValue = Annotated[int | float, WithJsonSchema({"type": "number"})]
"""A reward as Harbor types it (`float | int`): an integer stays one (`1`, not `1.0`)."""


class StepRecord(Model):
    """One step of a multi-step trial: its outcome and rewards (its phases are in `phases`)."""

    name: str
    state: StepState = "Pending"
    rewards: dict[str, RewardValue] | None = None
    error: TrialError | None = None
    message: str | None = None


class AttemptRecord(Model):
    """An attempt that ended in an infrastructure failure and was retried."""

    attempt: int
    pod_name: str | None = None
    reason: str
    message: str
    started_at: str | None = None
    finished_at: str | None = None


class QueueRecord(Model):
    """Kueue's admission of the current attempt (a Trial labelled with a LocalQueue)."""

    name: str = Field(description="The LocalQueue (`kueue.x-k8s.io/queue-name`).")
    workload: str | None = Field(default=None, description="The attempt's Workload.")
    cluster_queue: str | None = None
    flavors: dict[str, str] = Field(default={}, description="Resource → admitted flavor.")
    queued_at: str | None = None
    admitted_at: str | None = None
    preemptions: int = Field(default=0, description="Attempts ended by Kueue's eviction; "
                             "they do not count against `retries`.")


class TrialStatus(Model):
    observed_generation: int | None = None
    phase: TrialPhaseName = "Pending"
    # What runs now, for `kubectl get`: "agent", or "<step>/agent" in a multi-step trial.
    current_phase: str | None = None
    conditions: list[Condition] = []
    task_digest: str | None = None
    pod_name: str | None = None
    # The clock tick before which the environment pod's processes are its image's (the runner's
    # base, runner.sh): kept here, where its agent cannot write, for the launches after its first.
    pod_process_base: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    reward: RewardValue | None = None
    rewards: dict[str, RewardValue] | None = None
    phases: list[PhaseRecord] = []
    steps: list[StepRecord] = []
    error: TrialError | None = None
    agent_result: AgentResult | None = None
    logs_config_map: str | None = None
    verifier_pod_name: str | None = None
    attempt: int = 1
    attempts: list[AttemptRecord] = []
    retry_at: str | None = None
    queue: QueueRecord | None = None
    warm_pod: str | None = Field(default=None, description="The warm pod the current attempt "
                                 "claimed as its environment pod (docs/warm-pods.md).")
    # Pods into which a launch of task code was sent (its answer may never have come: the
    # container may end during it): their container's end is that code's failure, also for an
    # operator restarted before the answer was recorded.
    task_code_sent: list[str] | None = None


class WarmPoolSpec(Model):
    """Ready pods of a task (`docs/warm-pods.md`): a Trial of the task in the namespace whose
    environment pod would be the same (agent bundles, environment overrides, pod settings)
    claims one instead of creating a pod."""

    task_ref: LocalObjectReference
    replicas: int = Field(default=1, ge=0, le=100, description="Unclaimed pods to keep.")
    agent: AgentSpec = Field(default=AgentSpec(name="nop"), description="The agent whose pods "
                             "these are (only an installed agent's bundle matters: oracle, nop "
                             "and command agents share pods).")
    environment: EnvironmentSpec = EnvironmentSpec()
    pod: PodSettings = PodSettings()


class WarmPoolStatus(Model):
    observed_generation: int | None = None
    ready: int = Field(default=0, description="Unclaimed pods that are running.")
    starting: int = Field(default=0, description="Unclaimed pods not running yet.")
    claimed: int = Field(default=0, description="Pods of this pool claimed by a Trial, "
                         "still there.")
    key: str | None = Field(default=None, description="The fit of its pods (their spec's "
                            "digest); a Trial whose pod has another does not claim them.")
    conditions: list[Condition] = []
