"""Task + Trial → the ordered plan of phases a trial runs (docs/harbor.md §b.3 single-step, §b.4
multi-step, §b.5 verification, separate verifiers per §a.5).

Each phase is what the in-pod runner executes in one of the trial's pods: an optional root
`prepare` script that puts uploaded files in place, then the phase's command as the phase's
user under its timeout. The plan says what each phase does (its script intent, below); the
shell itself is written by `shipyard.render.phase_scripts`. Files reach a pod only with the
phase that needs them: a solution with the oracle's agent phase, tests with verification, a
step's workdir with its setup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from shipyard.api.conventions import Role
from shipyard.api.models import TrialSpec
from shipyard.api.reasons import Reason
from shipyard.plan.accelerators import (
    NO_ACCELERATORS,
    NO_OVERRIDES,
    AcceleratorError,
    Accelerators,
    PodOverrides,
    SchedulingSettings,
    resolve_accelerators,
)
from shipyard.plan.agents import (
    DEFAULT_BUNDLE_REPOSITORY,
    INSTALLED_AGENTS,
    AgentConfigError,
    AgentRun,
    agent_run,
    base_url_host,
    with_mcp_servers,
)
from shipyard.plan.capacity import (
    NodeCapacity,
    PodRequests,
    fits_some,
    never_fits_message,
    pod_requests,
)
from shipyard.plan.compose import ComposePod, SidecarEvidence, compose_pod, sidecar_evidence
from shipyard.plan.network import (
    MODEL_KEY_SUFFIX,
    Fence,
    ModelPeer,
    NetworkSettings,
    TrialNetwork,
    UnenforceablePolicy,
    check_enforceable,
    check_never_reached,
    phases_by_description,
    trial_network,
    with_model_access,
)
from shipyard.taskformat import (
    ArtifactConfig,
    EnvironmentConfig,
    HealthcheckConfig,
    LoadedTask,
    MissingEnvVar,
    StepSettings,
    TaskFormatError,
    VerifierCollectConfig,
    effective_timeout,
    resolve_env_templates,
    resolve_network_plan,
    runnable,
    step_settings,
)
from shipyard.taskformat.compose import MAIN, ComposeEnvironment, load_compose
from shipyard.taskformat.envtemplates import env_total_problem
from shipyard.taskformat.resolve import held

PhaseKind = Literal[
    "environment", "healthcheck", "setup", "agent", "collect", "verifier-environment",
    "verifier",
]
PodRole = Role  # the pod a phase runs in

LOG_DIRS = ("/logs/verifier", "/logs/agent", "/logs/artifacts")
INSTRUCTION_PATH = "/shipyard/instruction.md"
ARTIFACTS_TAR = "/shipyard/state/artifacts.tar"
"""Where the collect phase (as root) packs the artifacts: in the runner's own root-only folder,
so no unprivileged process can swap it before the operator reads it."""
REWARD_JSON = "/logs/verifier/reward.json"
REWARD_TXT = "/logs/verifier/reward.txt"
TEST_STDOUT = "/logs/verifier/test-stdout.txt"
TEST_STDERR = "/logs/verifier/test-stderr.txt"
CTRF_JSON = "/logs/verifier/ctrf.json"
"""Files a test script may write beside its reward (pytest's `--ctrf` report, its own stderr):
kept with the trial's logs when present, exported where Harbor's viewer reads them."""
VERIFIER_REPORTS = (TEST_STDERR, CTRF_JSON)
VERIFIER_DIR = "/logs/verifier/"
"""Collected as a folder: the other files the test script wrote there (Harbor downloads the
whole folder into the trial's `verifier/`), kept together within one report's budget."""
REPORT_LIMIT_BYTES = 64 * 1024
"""The most a verifier report keeps in the logs ConfigMap."""
AGENT_LOGS = {
    "oracle": "/logs/agent/oracle.txt",
    "command": "/logs/agent/command.txt",
}


class PlanError(Exception):
    """The trial cannot run as asked; `reason` is a terminal condition reason."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# ---------------------------------------------------------------- script intents
# What a phase's scripts do; `shipyard.render.phase_scripts` writes the shell.


@dataclass(frozen=True)
class EnvironmentScript:
    """Harbor's ensure_dirs; the environment/ files copied into the workdir (prebuilt image)."""

    workdir: str | None
    copy_environment: bool


@dataclass(frozen=True)
class HealthcheckScript:
    check: HealthcheckConfig


@dataclass(frozen=True)
class SetupScript:
    """A step's setup: /logs/agent reset, its workdir/ files (`files`) in place, setup.sh."""

    previous_shared: bool  # the previous step's shared verifier left /tests and rewards
    files: tuple[str, ...]
    user: str | None


@dataclass(frozen=True)
class OracleScript:
    script: str  # solve.sh, relative to the solution directory


@dataclass(frozen=True)
class CommandAgentScript:
    command: str


@dataclass(frozen=True)
class CollectScript:
    hooks: tuple[VerifierCollectConfig, ...]
    artifacts: tuple[ArtifactConfig, ...]  # the main service's, packed for the verifier pod


@dataclass(frozen=True)
class VerifierEnvironmentScript:
    """A separate verifier pod's setup: log dirs and the agent environment's artifacts, each
    copied to its own declared path (`artifacts`, absolute) from the operator's clean tar
    (`shipyard.render.artifact_bundle`)."""

    artifacts: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerifyScript:
    test_script: str
    hooks: tuple[VerifierCollectConfig, ...]  # collect hooks first (a shared verifier)
    upload_tests: bool  # False when the tests are bundled in the verifier's image
    artifacts: tuple[ArtifactConfig, ...] = ()
    """A shared verifier: the main service's artifacts, packed after the collect hooks and
    before the tests run (Harbor collects them there), kept by the operator for the export."""


@dataclass(frozen=True)
class InstalledAgentScript:
    """An installed agent's run (`shipyard.plan.agents`): the instruction into its file, for
    install: script Harbor's install commands, then the agent."""

    run: AgentRun


ScriptIntent = (EnvironmentScript | HealthcheckScript | SetupScript | OracleScript
                | CommandAgentScript | InstalledAgentScript | CollectScript
                | VerifierEnvironmentScript | VerifyScript)


@dataclass(frozen=True)
class PhaseSpec:
    name: PhaseKind
    command: str = "true"
    """Plain shell, for a phase without a `script` intent."""
    id: str = ""  # unique among the phases of a trial; also the runner's phase id
    step: str | None = None
    pod: Role = Role.ENV
    user: str | None = None
    timeout_sec: float | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    prepare: str | None = None
    payload: dict[str, bytes] = field(default_factory=dict)
    collect: tuple[str, ...] = ()
    secrets: bool = False
    keep_processes: bool = False
    """Processes the phase leaves are not ended after it, nor before the next (verifier
    `agentProcesses: Keep`), except those holding a secret value."""
    log_files: tuple[str, ...] = ()
    """Collected files that are kept as the phase's logs after the pod is gone."""
    # the oracle's agent phase: a non-zero exit is not an error (docs/harbor.md §d.4)
    oracle: bool = False
    installed_agent: str | None = None  # an installed agent's name (its output is parsed)
    model: str | None = None
    agent_version: str | None = None
    agent_native: str | None = None  # the collected native record (for trajectory.json)
    network: str | None = None  # the network policy key while the phase runs
    fence: Fence | None = None
    """Checked before anything of the phase: its network policy in force (`Fence`)."""
    script: ScriptIntent | None = None
    """What the phase's scripts do (rendered by `shipyard.render.phase_scripts`)."""


@dataclass(frozen=True)
class PodPlan:
    image: str
    image_pull_policy: str
    workdir: str | None
    container_env: dict[str, str]
    cpus: float | None
    memory_mb: int | None
    storage_mb: int | None
    accelerators: Accelerators = NO_ACCELERATORS
    agent_bundles: tuple[tuple[str, str], ...] = ()
    """(agent name, bundle image) copied into /shipyard/agents by init containers."""
    compose: ComposePod | None = None
    """The task's docker-compose sidecars (the environment pod only)."""
    entrypoint: tuple[str, ...] | None = None
    """The image's ENTRYPOINT (empty: none), None when its config could not be read."""


@dataclass(frozen=True)
class StepPlan:
    name: str | None  # None for a single-step task
    verifier_mode: str
    min_reward: float | dict[str, float] | None
    verifier_pod: PodPlan | None  # separate verifiers only
    bundled_tests: bool = False
    sidecar_evidence: tuple[SidecarEvidence, ...] = ()
    """Separate verifiers only: what is collected from docker-compose sidecars."""
    artifacts: tuple[ArtifactConfig, ...] = ()
    """The step's collection set (the convention entry first): the rows of Harbor's
    `artifacts/manifest.json` in the export."""


@dataclass(frozen=True)
class TrialPlan:
    environment: PodPlan
    start_timeout_sec: float
    phases: tuple[PhaseSpec, ...]
    steps: tuple[StepPlan, ...]
    secret_names: tuple[str, ...]
    reward_strategy: Literal["mean", "final"] | None  # None for single-step
    network: TrialNetwork | None = None  # None: no network objects (tests of other parts)
    pod_overrides: PodOverrides = NO_OVERRIDES
    unschedulable_grace_sec: float = SchedulingSettings.unschedulable_grace_sec
    image_pull_grace_sec: float = SchedulingSettings.image_pull_grace_sec
    log_limit_bytes: int = SchedulingSettings.log_limit_bytes
    nodes: tuple[NodeCapacity, ...] = ()
    """The schedulable nodes' allocatable CPU and memory when planned (empty: not known)."""
    release_environment: bool = False
    """The environment pod goes before the last step's separate verifier pod is created."""
    log_key_bytes: int = SchedulingSettings.log_limit_bytes
    """What each key of the logs ConfigMap keeps (`log_budget`)."""
    report_key_bytes: int = REPORT_LIMIT_BYTES
    """What each verifier report keeps there (`report_budget`)."""

    @property
    def multi_step(self) -> bool:
        return self.reward_strategy is not None

    def phase(self, phase_id: str) -> PhaseSpec:
        return next(p for p in self.phases if p.id == phase_id)

    def step(self, name: str | None) -> StepPlan:
        return next(s for s in self.steps if s.name == name)

    # Compatibility for single-pod callers.
    @property
    def image(self) -> str:
        return self.environment.image


def phase_id(kind: str, step_index: int | None) -> str:
    return kind if step_index is None else f"s{step_index}-{kind}"


def check_runnable(task: LoadedTask, spec: TrialSpec,
                   scheduling: SchedulingSettings | None = None) -> None:
    """PlanError (TaskInvalid) when this operator will not run the task at all
    (`taskformat.runnable`): before any image is built or pod created."""
    pull_secrets = bool(spec.pod.image_pull_secrets or (
        scheduling or SchedulingSettings()).pod_defaults.image_pull_secrets)
    refused = runnable.refusal(task, pull_secrets)
    if refused is not None:
        raise PlanError(Reason.TASK_INVALID, refused)


def start_images(task: LoadedTask, spec: TrialSpec, images: Mapping[str, str],
                 network: NetworkSettings | None) -> tuple[str, ...]:
    """The images whose ENTRYPOINT a trial's pods may fence (`build_plan`'s `entrypoints`):
    none unless the pods' starts are fenced (`Fence.containers`)."""
    if network is None or network.fence is None or not network.fence.containers:
        return ()
    refs = {spec.environment.image, task.config.environment.docker_image, *images.values()}
    for step in task.step_names() if task.is_multi_step else [None]:
        verifier = task.verifier_environment(step)
        if verifier is not None:
            refs.add(verifier.config.docker_image)
    return tuple(sorted(r for r in refs if r))


def build_plan(task: LoadedTask, spec: TrialSpec, environ: Mapping[str, str],
               network: NetworkSettings | None = None,
               scheduling: SchedulingSettings | None = None,
               bundle_repository: str | None = None,
               images: Mapping[str, str] | None = None,
               nodes: tuple[NodeCapacity, ...] = (),
               entrypoints: Mapping[str, tuple[str, ...]] | None = None) -> TrialPlan:
    """The plan, or PlanError with a reason from the closed set when the trial cannot run.

    `environ` serves the task's ${VAR} templates. `network` holds the operator's network
    settings resolved against the cluster (the FQDN backend above all; without it,
    NetworkPolicy enforcement without an FQDN backend) and `scheduling` its scheduling
    settings (defaults without it); `images` the Task's images by role (`status.images`:
    built or prebuilt), of which the Trial's own `spec.environment.image` wins; `nodes` the
    cluster's nodes, against which a pod that can never fit is refused now; `entrypoints`
    the ENTRYPOINT of each image (by reference) whose config was read."""
    config = task.config
    env_config = config.environment
    check_runnable(task, spec, scheduling)
    images = images or {}
    image = spec.environment.image or images.get("environment") or env_config.docker_image
    if not image:
        raise PlanError(
            Reason.TASK_INVALID,
            "environment.docker_image: the task has none, nor an environment/Dockerfile to "
            "build one from, and the Trial sets no spec.environment.image: there is no image "
            "to run",
        )
    if env_config.os != "linux":
        raise PlanError(Reason.TASK_INVALID,
                        "environment.os: only linux tasks can run on Kubernetes")
    steps: list[str | None] = list(task.step_names()) if task.is_multi_step else [None]
    installed = _installed_agent(spec, bundle_repository)
    trial_net = _network(task, spec, steps, network or NetworkSettings(), installed)
    if installed is not None and any(
            trial_net.policies[s.agent.removesuffix(MODEL_KEY_SUFFIX)].mode != "public"
            for s in trial_net.steps.values()):
        installed = _installed_agent(spec, bundle_repository, web_tools=False)
    if installed is not None:
        try:
            installed = with_mcp_servers(installed, env_config.mcp_servers)
        except AgentConfigError as e:
            raise PlanError(Reason.TRIAL_INVALID, str(e)) from e
    container_env = _resolved(env_config.env, environ, "environment.env")
    solution_env = _resolved(config.solution.env, environ, "solution.env")
    container_env.update({v.name: v.value for v in spec.environment.env})
    compose = _compose(task, container_env)
    if compose is not None and compose.main is not None:  # the task's env wins, as in Harbor
        container_env = {**compose.main.environment, **container_env}
    environment = PodPlan(
        image=image,
        image_pull_policy=spec.environment.image_pull_policy or "IfNotPresent",
        workdir=env_config.workdir,
        container_env=container_env,
        cpus=spec.environment.override_cpus or env_config.cpus,
        memory_mb=spec.environment.override_memory_mb or env_config.memory_mb,
        storage_mb=spec.environment.override_storage_mb or env_config.storage_mb,
        accelerators=_accelerators(env_config, "environment"),
        agent_bundles=((installed.name, installed.bundle_image),)
        if installed is not None and installed.bundle_image else (),
        compose=compose_pod(compose, images, task.files) if compose is not None else None,
        entrypoint=(entrypoints or {}).get(image),
    )

    phases = [environment_phase(task, workdir=env_config.workdir)]
    if env_config.healthcheck is not None:
        phases.append(healthcheck_phase(env_config.healthcheck, None, None, "healthcheck"))
    step_plans = []
    previous_shared = False
    for index, step in enumerate(steps, start=1):
        try:
            settings = step_settings(config, step, trial_artifacts=[
                ArtifactConfig(**a.model_dump()) for a in spec.artifacts])
        except (ValueError, TaskFormatError) as e:
            raise PlanError(Reason.TRIAL_INVALID, f"spec.artifacts: {e}") from e
        i = None if step is None else index
        verifier_env = _resolved(settings.verifier_env, environ, "verifier.env")
        verifier_env.update({v.name: v.value for v in spec.verifier.env})
        agent_user = _user(settings.agent_user)
        if step is not None:
            phases.append(setup_phase(task, step, i, agent_user, previous_shared))
            if settings.healthcheck is not None:
                phases.append(healthcheck_phase(settings.healthcheck, step, agent_user,
                                                phase_id("healthcheck", i)))
        agent_timeout = effective_timeout(
            settings.agent_timeout_sec,
            override=spec.agent.override_timeout_sec,
            max_timeout=spec.agent.max_timeout_sec,
            multiplier=spec.agent_timeout_multiplier or spec.timeout_multiplier,
        )
        phases.append(agent_phase(task, spec, step, i, agent_user, agent_timeout, solution_env,
                                  installed))
        verifier_timeout = effective_timeout(
            settings.verifier_timeout_sec,
            override=spec.verifier.override_timeout_sec,
            max_timeout=spec.verifier.max_timeout_sec,
            multiplier=spec.verifier_timeout_multiplier or spec.timeout_multiplier,
        )
        step_plan = replace(_step_plan(task, spec, step, settings, environment, environ, images,
                                       entrypoints or {}),
                            artifacts=tuple(settings.artifacts))
        if compose is not None:
            step_plan = replace(step_plan, sidecar_evidence=sidecar_evidence(
                settings.collect, settings.artifacts))
        step_plans.append(step_plan)
        if step_plan.verifier_mode == "separate":
            collect = collect_phase(settings.collect, settings.artifacts, step, i)
            phases.append(collect)
            assert isinstance(collect.script, CollectScript)
            sidecar_sources = tuple(a.source for e in step_plan.sidecar_evidence
                                    for a in e.artifacts)
            phases.append(verifier_environment_phase(
                step, i, tuple(a.source for a in collect.script.artifacts) + sidecar_sources))
        phases.append(
            verifier_phase(task, step, i, _user(settings.verifier_user), verifier_timeout,
                           verifier_env, settings.collect, step_plan)
        )
        previous_shared = step_plan.verifier_mode == "shared"
    _check_env_room(phases, container_env, spec)
    keep = spec.verifier.agent_processes == "Keep"
    start_timeout = held((spec.environment.build_timeout_sec or env_config.build_timeout_sec)
                         * spec.timeout_multiplier)
    plan = TrialPlan(
        environment=environment,
        start_timeout_sec=start_timeout,
        phases=tuple(replace(_with_network(p if p.id else _with_id(p), trial_net),
                             keep_processes=keep) for p in phases),
        steps=tuple(step_plans),
        secret_names=tuple(s.secret_ref.name for s in spec.agent.env_from),
        reward_strategy=config.reward_strategy if task.is_multi_step else None,
        network=trial_net,
        pod_overrides=(scheduling or SchedulingSettings()).pod_defaults.under(PodOverrides(
            node_selector=dict(spec.pod.node_selector),
            tolerations=tuple(t.model_dump(by_alias=True, exclude_none=True)
                              for t in spec.pod.tolerations),
            priority_class_name=spec.pod.priority_class_name,
            runtime_class_name=spec.pod.runtime_class_name,
            image_pull_secrets=tuple(s.name for s in spec.pod.image_pull_secrets),
        )),
        unschedulable_grace_sec=_unschedulable_grace(
            spec, scheduling or SchedulingSettings(),
            [environment, *(s.verifier_pod for s in step_plans if s.verifier_pod)],
        ),
        image_pull_grace_sec=(scheduling or SchedulingSettings()).image_pull_grace_sec,
        log_limit_bytes=(scheduling or SchedulingSettings()).log_limit_bytes,
        nodes=nodes,
        release_environment=(scheduling or SchedulingSettings()).release_environment,
        log_key_bytes=log_budget(phases, (scheduling or SchedulingSettings()).log_limit_bytes),
        report_key_bytes=report_budget(phases),
    )
    refusal = capacity_refusal(plan)
    if refusal is not None:
        raise PlanError(Reason.UNSCHEDULABLE, refusal)
    return plan


def _check_env_room(phases: list[PhaseSpec], container_env: Mapping[str, str],
                    spec: TrialSpec) -> None:
    """Refuse, before any pod, a phase whose whole environment (the container's and its own)
    no process could start with; else it would fail `argument list too long` in the pod."""
    for phase in phases:
        problem = env_total_problem({**container_env, **phase.env})
        if problem is None:
            continue
        trial_env = spec.environment.env or spec.agent.env or spec.verifier.env
        source = "the task's env tables and the Trial's env" if trial_env else \
            "the task's env tables"
        raise PlanError(Reason.TRIAL_INVALID if trial_env else Reason.TASK_INVALID,
                        f"{phase.id or phase.name} phase: {source}: {problem}")


def pod_requests_of(plan: TrialPlan, pod: PodPlan) -> PodRequests:
    return pod_requests(pod.cpus, pod.memory_mb, plan.pod_overrides)


def capacity_refusal(plan: TrialPlan) -> str | None:
    """Why the trial's pods can never be scheduled on these nodes (None: they can, or the nodes
    are not known). Accelerator pods are left to the accelerator grace (a node pool may
    scale up). A non-last step's separate verifier runs beside the environment, so the pair
    must fit one node; the last step's runs after the environment pod is gone."""
    if not plan.nodes:
        return None
    env = pod_requests_of(plan, plan.environment)
    pods = [("environment pod", plan.environment, env)]
    pods += [(f"separate verifier pod{f' of step {s.name}' if s.name else ''}", s.verifier_pod,
              pod_requests_of(plan, s.verifier_pod)) for s in plan.steps if s.verifier_pod]
    for what, pod, requests in pods:
        if pod.accelerators.requested:
            continue
        if not fits_some(requests, plan.nodes):
            return never_fits_message(what, requests, pod.cpus, plan.nodes)
    for step in plan.steps if not plan.release_environment else plan.steps[:-1]:
        verifier = step.verifier_pod
        if (verifier is None or verifier.accelerators.requested
                or plan.environment.accelerators.requested):
            continue
        both = env + pod_requests_of(plan, verifier)
        if not fits_some(both, plan.nodes):
            why = ("a later step needs the environment" if step is not plan.steps[-1]
                   else "SHIPYARD_RELEASE_ENVIRONMENT is off")
            return (f"{f'step {step.name}' + chr(39) + 's' if step.name else 'the'} separate "
                    f"verifier runs beside the environment ({why}), and the two pods together "
                    + never_fits_message("pair", both, None, plan.nodes)
                    .removeprefix("the pair "))
    return None


def _compose(task: LoadedTask, env: Mapping[str, str]) -> ComposeEnvironment | None:
    try:
        return load_compose(task, env)
    except TaskFormatError as e:
        raise PlanError(Reason.TASK_INVALID, str(e)) from e


def _with_network(phase: PhaseSpec, network: TrialNetwork) -> PhaseSpec:
    """The phase's policy key, and its fence: a pod's first phase (Shipyard's own) proves the
    pod's policy in force; a `no-network` phase on a pod whose baseline has DNS proves the
    switch to it (the cluster DNS refused) instead of waiting the settle time."""
    key = network.phase_key(phase.name, phase.step, phase.pod)
    fence = None
    if isinstance(phase.script, (EnvironmentScript, VerifierEnvironmentScript)):
        fence = network.fence
    elif network.dns_fence is not None and network.offline(key) \
            and not network.offline(network.baseline(phase.pod, phase.step)):
        fence = network.dns_fence
    return replace(phase, network=key, fence=fence)


def _installed_agent(spec: TrialSpec, repository: str | None,
                     web_tools: bool = True) -> AgentRun | None:
    if spec.agent.name not in INSTALLED_AGENTS:
        return None
    try:
        return agent_run(spec.agent, repository or DEFAULT_BUNDLE_REPOSITORY, web_tools)
    except AgentConfigError as e:
        raise PlanError(Reason.TRIAL_INVALID, str(e)) from e


def _network(task: LoadedTask, spec: TrialSpec, steps: list[str | None],
             settings: NetworkSettings, installed: AgentRun | None = None) -> TrialNetwork:
    """The policies of every step (docs/harbor.md §a.5, with the Trial's extra hosts), refused
    before any pod starts when a restricted policy could not be enforced: never run open.

    An installed agent's model endpoint is added to the agent phase alone: `baseURL`'s host as
    an extra agent host, or, for an in-cluster model server, its pods by selector."""
    extra = spec.network.extra_allowed_hosts
    agent_hosts = list(extra.agent)
    host = base_url_host(spec.agent) if installed is not None else None
    if host and spec.agent.model_endpoint is None and host not in agent_hosts:
        agent_hosts.append(host)
    plans = {}
    for step in steps:
        try:
            plans[step] = resolve_network_plan(
                task.config, step,
                extra_environment_hosts=extra.environment,
                extra_agent_hosts=agent_hosts,
                extra_verifier_hosts=extra.verifier,
            )
        except TaskFormatError as e:
            option = (e.field or "extra_environment_hosts").split("_")[1]
            raise PlanError(
                Reason.TRIAL_INVALID, f"spec.network.extraAllowedHosts.{option}: {e.reason}"
            ) from e
    try:
        check_enforceable(phases_by_description(plans), settings.fqdn_backend)
        check_never_reached(phases_by_description(plans), settings.never_cidrs)
    except UnenforceablePolicy as e:
        raise PlanError(Reason.NETWORK_POLICY_UNENFORCEABLE, e.message) from e
    if installed is not None and not installed.bundled:
        closed = [s or "the task" for s, p in plans.items() if p.agent_phase.mode != "public"]
        if closed:
            raise PlanError(
                Reason.TRIAL_INVALID,
                f"spec.agent.install: 'script' runs Harbor's install commands, which need "
                f"egress to {', '.join(installed.install_hosts)}, and the agent phase of "
                f"{', '.join(closed)} is not public (no-network or allowlist); use "
                "install: bundle (the default), which needs no network")
    net = trial_network(plans)
    endpoint = spec.agent.model_endpoint
    if installed is not None and endpoint is not None:
        net = with_model_access(net, ModelPeer(
            pod_selector=tuple(sorted(endpoint.pod_selector.items())),
            namespace=endpoint.namespace, port=endpoint.port),
            public_reaches_pods=not settings.block_cluster)
    return replace(net, fence=settings.fence, dns_fence=settings.dns_fence)


def _accelerators(config: EnvironmentConfig, where: str) -> Accelerators:
    try:
        return resolve_accelerators(config)
    except AcceleratorError as e:
        field_ = e.field.replace("environment", where, 1)
        raise PlanError(Reason.TASK_INVALID, f"{field_}: {e.message}") from e


def _unschedulable_grace(spec: TrialSpec, settings: SchedulingSettings,
                         pods: list[PodPlan]) -> float:
    if spec.environment.unschedulable_grace_sec:
        return spec.environment.unschedulable_grace_sec
    if any(p.accelerators.requested for p in pods):
        return settings.accelerator_grace_sec
    return settings.unschedulable_grace_sec


def _with_id(phase: PhaseSpec) -> PhaseSpec:
    from dataclasses import replace

    return replace(phase, id=phase.name)


def _resolved(env: Mapping[str, str], environ: Mapping[str, str], table: str
              ) -> dict[str, str]:
    """``${VAR}`` values resolved from the operator's environment, which plays Harbor's host."""
    try:
        return resolve_env_templates(env, environ)
    except MissingEnvVar as e:
        raise PlanError(
            Reason.TASK_INVALID,
            f"task.toml: {table}.{e.key}: {e} (Shipyard resolves ${{{e.name}}} from the "
            f"operator's environment, for the names SHIPYARD_TASK_ENV_ALLOW lets through: set "
            f"{e.name} there and allow it, or give the value a default, ${{{e.name}:-...}})"
        ) from e


def _step_plan(task: LoadedTask, spec: TrialSpec, step: str | None, settings: StepSettings,
               environment: PodPlan, environ: Mapping[str, str],
               images: Mapping[str, str],
               entrypoints: Mapping[str, tuple[str, ...]]) -> StepPlan:
    min_reward = settings.min_reward
    if settings.verifier_mode == "shared":
        return StepPlan(step, "shared", min_reward, None)
    verifier = task.verifier_environment(step)
    assert verifier is not None
    where = f"steps/{step}/tests" if step else "tests"
    role = "verifier" if verifier.context_dir == "tests/" else f"verifier.{step}"
    image = images.get(role) if verifier.context_dir != "environment/" else None
    image = image or verifier.config.docker_image
    if image is None:
        if verifier.context_dir != "environment/":
            raise PlanError(
                Reason.TASK_INVALID,
                f"{where}/Dockerfile: the separate verifier's image must be built from a "
                "Dockerfile, which this Shipyard version cannot do yet; set "
                "[verifier.environment].docker_image to a prebuilt image",
            )
        image = spec.environment.image or environment.image
    env = _resolved(verifier.config.env, environ, "verifier.environment.env")
    pod = PodPlan(
        image=image,
        image_pull_policy=environment.image_pull_policy,
        workdir=verifier.config.workdir,
        container_env=env,
        cpus=verifier.config.cpus,
        memory_mb=verifier.config.memory_mb,
        storage_mb=verifier.config.storage_mb,
        accelerators=_accelerators(verifier.config, "verifier.environment"),
        entrypoint=entrypoints.get(image),
    )
    return StepPlan(step, "separate", min_reward, pod, verifier.bundled_tests)


def _user(user: str | int | None) -> str | None:
    return None if user is None else str(user)


def environment_phase(task: LoadedTask, workdir: str | None) -> PhaseSpec:
    """Harbor's ensure_dirs, plus the environment/ files for a prebuilt image (docs/harbor.md §b.3
    2.2)."""
    files = task.tree("environment/")
    built = "Dockerfile" in files or "docker-compose.yaml" in files
    payload = {} if built else {f"environment/{k}": v for k, v in files.items()}
    return PhaseSpec(name="environment", id="environment", payload=payload,
                     script=EnvironmentScript(workdir, bool(payload)))


def healthcheck_phase(check: HealthcheckConfig, step: str | None, user: str | None,
                      id_: str) -> PhaseSpec:
    """Harbor's healthcheck loop, run inside the pod."""
    held_check = check.model_copy(update={
        "retries": min(check.retries, 2**31 - 1),  # the runner's ints; a year of retries
        **{name: held(getattr(check, name))
           for name in ("interval_sec", "timeout_sec", "start_period_sec", "start_interval_sec")}})
    return PhaseSpec(name="healthcheck", id=id_, step=step, user=user,
                     script=HealthcheckScript(held_check))


def setup_phase(task: LoadedTask, step: str, index: int, user: str | None,
                previous_shared: bool) -> PhaseSpec:
    """Harbor's `_prepare_step`: reset /logs/agent (and the shared verifier's leftovers),
    upload the step's workdir/ into the working directory, run its setup.sh there."""
    files = task.workdir_files(step)
    payload = {f"workdir/{k}": v for k, v in files.items()}
    return PhaseSpec(name="setup", id=phase_id("setup", index), step=step, user=user,
                     payload=payload,
                     script=SetupScript(previous_shared, tuple(sorted(files)), user))


def agent_phase(
    task: LoadedTask,
    spec: TrialSpec,
    step: str | None,
    index: int | None,
    user: str | None,
    timeout: float | None,
    solution_env: dict[str, str],
    installed: AgentRun | None = None,
) -> PhaseSpec:
    agent = spec.agent
    cwd = task.config.environment.workdir
    base = {"name": "agent", "id": phase_id("agent", index), "step": step, "user": user,
            "timeout_sec": timeout, "cwd": cwd}
    if agent.name == "nop":
        return PhaseSpec(command="true", **base)
    if agent.name == "oracle":
        files = task.solution_files(step)
        script = task.solution_script(step)
        if files is None or script is None:
            where = f"steps/{step}/solution" if step else "solution"
            raise PlanError(Reason.TASK_INVALID, f"{where}/solve.sh: the oracle agent needs a "
                                           "solution script and the task has none")
        log = AGENT_LOGS["oracle"]
        # [solution].env wins over the agent's env (docs/harbor.md §d.4).
        env = {v.name: v.value for v in agent.env}
        env.update({"DEBIAN_FRONTEND": "noninteractive", **solution_env})
        return PhaseSpec(
            env=env, script=OracleScript(script),
            payload={f"solution/{k}": v for k, v in files.items()},
            collect=(log, "/logs/agent/exit-code.txt"), secrets=bool(agent.env_from),
            log_files=(log,), oracle=True, **base,
        )
    if installed is not None:
        return installed_agent_phase(task, spec, step, installed, base)
    if not agent.command:
        raise PlanError(Reason.TRIAL_INVALID,
                        "spec.agent.command: required when spec.agent.name is 'command'")
    log = AGENT_LOGS["command"]
    instruction = task.step_instruction(step) if step else task.instruction
    env = {v.name: v.value for v in agent.env}
    env["SHIPYARD_INSTRUCTION_FILE"] = INSTRUCTION_PATH
    return PhaseSpec(
        env=env, script=CommandAgentScript(agent.command),
        payload={"instruction.md": instruction.encode()},
        collect=(log,), secrets=bool(agent.env_from), log_files=(log,), **base,
    )


def installed_agent_phase(task: LoadedTask, spec: TrialSpec, step: str | None, run: AgentRun,
                          base: dict) -> PhaseSpec:
    """An installed agent (docs/harbor.md §d.2): the instruction in a file, keys from the Secrets
    only, the agent from its bundle (or, for install: script, Harbor's install commands run first as
    root)."""
    instruction = task.step_instruction(step) if step else task.instruction
    # The Trial's agent env wins over the agent's defaults, as Harbor's AgentConfig.env.
    env = {**run.env, **{v.name: v.value for v in spec.agent.env}}
    return PhaseSpec(
        env=env, script=InstalledAgentScript(run),
        payload={"instruction.md": instruction.encode()},
        collect=run.collect, secrets=bool(spec.agent.env_from), log_files=(run.log,),
        installed_agent=run.name, model=spec.agent.model, agent_version=run.version,
        agent_native=run.native, **base,
    )


def collect_phase(hooks: list[VerifierCollectConfig], artifacts: list[ArtifactConfig],
                  step: str | None, index: int | None) -> PhaseSpec:
    """Before a separate verifier: collect hooks, then the artifacts packed for the verifier
    pod (best effort, as Harbor's collection never fails a trial)."""
    main_hooks = tuple(h for h in hooks if h.service == "main")  # sidecars': SidecarEvidence
    return PhaseSpec(name="collect", id=phase_id("collect", index), step=step,
                     script=CollectScript(main_hooks, main_artifacts(artifacts)))


def main_artifacts(artifacts: Sequence[ArtifactConfig]) -> tuple[ArtifactConfig, ...]:
    """The entries the environment pod's main container packs (sidecars' are copied out by
    the operator)."""
    return tuple(a for a in artifacts if a.effective_service == "main" and a.source.strip("/"))


def verifier_environment_phase(step: str | None, index: int | None,
                               artifacts: tuple[str, ...] = ()) -> PhaseSpec:
    """The separate verifier pod's setup: log dirs, an empty /logs/verifier, and the agent
    environment's artifacts re-materialized at their original paths (`artifacts`). The driver
    adds the artifacts, read and cleaned by the operator, to the payload when it launches
    this phase."""
    return PhaseSpec(name="verifier-environment", id=phase_id("verifier-environment", index),
                     step=step, pod=Role.VERIFIER, script=VerifierEnvironmentScript(artifacts))


def verifier_phase(
    task: LoadedTask,
    step: str | None,
    index: int | None,
    user: str | None,
    timeout: float | None,
    env: dict[str, str],
    collect_hooks: list[VerifierCollectConfig],
    step_plan: StepPlan,
) -> PhaseSpec:
    """Stale rewards removed, tests uploaded now (unless bundled in a verifier image), the
    test script run; for a shared verifier the collect hooks run first (best effort)."""
    separate = step_plan.verifier_mode == "separate"
    script = task.test_script(step)
    payload: dict[str, bytes] = {}
    if not step_plan.bundled_tests:
        payload = {f"tests/{k}": v for k, v in task.test_files(step).items()}
    cwd = step_plan.verifier_pod.workdir if separate and step_plan.verifier_pod else (
        task.config.environment.workdir)
    return PhaseSpec(
        name="verifier",
        id=phase_id("verifier", index),
        step=step,
        pod=Role.VERIFIER if separate else Role.ENV,
        script=VerifyScript(script, () if separate else tuple(
                                h for h in collect_hooks if h.service == MAIN),
                            not step_plan.bundled_tests,
                            () if separate else main_artifacts(step_plan.artifacts)),
        user=user,
        timeout_sec=timeout,
        cwd=cwd,
        env=env,
        payload=payload,
        collect=(REWARD_JSON, REWARD_TXT, TEST_STDOUT, *VERIFIER_REPORTS, VERIFIER_DIR),
        log_files=(TEST_STDOUT, *VERIFIER_REPORTS, VERIFIER_DIR),
    )


LOGS_BUDGET_BYTES = 900 * 1024
"""What a trial's logs ConfigMap may hold in all (the apiserver refuses one over 1 MiB; the
rest is room for its keys, metadata and truncation markers)."""
MIN_LOG_BYTES = 2048
MARKER_ROOM = 128  # `render.pod.TRUNCATED_MARKER`, formatted


def _log_keys(phases: list[PhaseSpec]) -> tuple[set[str], set[str]]:
    """The logs ConfigMap's keys: the phases' logs and trajectories, and the verifier reports."""
    keys = {log_key(p) for p in phases if p.log_files}
    keys |= {trajectory_key(p) for p in phases if p.installed_agent}
    return keys, {log_file_key(p, f) for p in phases for f in p.log_files[1:]}


def report_budget(phases: list[PhaseSpec]) -> int:
    """The most bytes one verifier report keeps: REPORT_LIMIT_BYTES, or less when many steps
    have them (all of them together take at most a quarter of the ConfigMap)."""
    reports = _log_keys(phases)[1]
    return min(REPORT_LIMIT_BYTES, LOGS_BUDGET_BYTES // 4 // max(1, len(reports)))


def log_budget(phases: list[PhaseSpec], limit: int) -> int:
    """The most bytes one key of the logs ConfigMap may hold: the operator's log limit, split
    among all the keys the trial writes (each step's agent and verifier logs and installed
    agents' trajectories, after the verifier reports' share), so that a many-step trial's
    ConfigMap stays under the apiserver's 1 MiB (above it every write failed and the trial
    never ended)."""
    keys, reports = _log_keys(phases)
    room = LOGS_BUDGET_BYTES - len(reports) * (report_budget(phases) + MARKER_ROOM)
    share = room // max(1, len(keys)) - MARKER_ROOM
    return max(MIN_LOG_BYTES, min(limit, share))


def log_key(phase: PhaseSpec) -> str:
    """The phase's key in the logs ConfigMap: `agent.log`, or `<step>.agent.log`."""
    kind = "agent" if phase.name == "agent" else "verifier"
    if phase.step is None:
        return f"{kind}.log"
    step = re.sub(r"[^-._a-zA-Z0-9]+", "_", phase.step)
    return f"{step}.{kind}.log"


def log_file_key(phase: PhaseSpec, path: str) -> str:
    """The key of one of the phase's log files: its first is the phase's log (`log_key`),
    the others are named by their file: `verifier.ctrf.json`, `<step>.verifier.ctrf.json`;
    a file of a collected folder as `verifier.file.<name>` (`folder_file_key`)."""
    if not phase.log_files or path == phase.log_files[0]:
        return log_key(phase)
    if path.endswith("/"):
        return folder_file_key(phase, "")
    return log_key(phase).removesuffix(".log") + "." + path.rsplit("/", 1)[-1]


FOLDER_FILE_INFIX = ".file."
_KEY_CHARS = re.compile(r"[-._a-zA-Z0-9]+")


def folder_file_key(phase: PhaseSpec, name: str) -> str:
    """`verifier.file.<name>` (`<step>.verifier.file.<name>`): one file of the verifier's
    folder in the logs ConfigMap; "" when the name cannot be a ConfigMap key (kept out)."""
    key = log_key(phase).removesuffix(".log") + FOLDER_FILE_INFIX + name
    return key if not name or (_KEY_CHARS.fullmatch(name) and len(key) <= 253) else ""


def trajectory_key(phase: PhaseSpec) -> str:
    """The key of an installed agent's ATIF trajectory in the logs ConfigMap:
    `agent.trajectory.json`, or `<step>.agent.trajectory.json`."""
    return log_key(phase).removesuffix(".log") + ".trajectory.json"
