"""Task + Trial → the ordered plan of phases a trial runs (Harbor §b.3 single-step, §b.4
multi-step, §b.5 verification, separate verifiers per §a.5).

Each phase is what the in-pod runner executes in one of the trial's pods: an optional root
`prepare` script that puts uploaded files in place, then the phase `command` as the phase's
user under its timeout. Files reach a pod only with the phase that needs them: a solution with
the oracle's agent phase, tests with verification, a step's workdir with its setup.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from shipyard.api.models import TrialSpec
from shipyard.plan.accelerators import (
    NO_ACCELERATORS,
    NO_OVERRIDES,
    AcceleratorError,
    Accelerators,
    PodOverrides,
    SchedulingSettings,
    resolve_accelerators,
)
from shipyard.plan.network import (
    NetworkSettings,
    TrialNetwork,
    UnenforceablePolicy,
    check_enforceable,
    phases_by_description,
    trial_network,
)
from shipyard.taskformat import (
    ArtifactConfig,
    EnvironmentConfig,
    HealthcheckConfig,
    LoadedTask,
    StepSettings,
    TaskFormatError,
    VerifierCollectConfig,
    effective_timeout,
    resolve_env_templates,
    resolve_network_plan,
    step_settings,
)

PhaseKind = Literal[
    "environment", "healthcheck", "setup", "agent", "collect", "verifier-environment",
    "verifier",
]
PodRole = Literal["env", "verifier"]

LOG_DIRS = ("/logs/verifier", "/logs/agent", "/logs/artifacts")
PAYLOAD = '"$SHIPYARD_PAYLOAD"'
INSTRUCTION_PATH = "/shipyard/instruction.md"
ARTIFACTS_TAR = "/shipyard/artifacts.tar"
REWARD_JSON = "/logs/verifier/reward.json"
REWARD_TXT = "/logs/verifier/reward.txt"
TEST_STDOUT = "/logs/verifier/test-stdout.txt"
AGENT_LOGS = {
    "oracle": "/logs/agent/oracle.txt",
    "command": "/logs/agent/command.txt",
}


class PlanError(Exception):
    """The trial cannot run as asked; `reason` is a terminal condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class PhaseSpec:
    name: PhaseKind
    command: str
    id: str = ""  # unique among the phases of a trial; also the runner's phase id
    step: str | None = None
    pod: PodRole = "env"
    user: str | None = None
    timeout_sec: float | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    prepare: str | None = None
    payload: dict[str, bytes] = field(default_factory=dict)
    collect: tuple[str, ...] = ()
    secrets: bool = False
    log_files: tuple[str, ...] = ()
    """Collected files that are kept as the phase's logs after the pod is gone."""
    oracle: bool = False  # the oracle's agent phase: a non-zero exit is not an error (§d.4)
    network: str | None = None  # the network policy key while the phase runs


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


@dataclass(frozen=True)
class StepPlan:
    name: str | None  # None for a single-step task
    verifier_mode: str
    min_reward: float | dict[str, float] | None
    verifier_pod: PodPlan | None  # separate verifiers only
    bundled_tests: bool = False


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
    log_limit_bytes: int = SchedulingSettings.log_limit_bytes

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


def build_plan(task: LoadedTask, spec: TrialSpec, environ: Mapping[str, str],
               network: NetworkSettings | None = None,
               scheduling: SchedulingSettings | None = None,
               images: Mapping[str, str] | None = None) -> TrialPlan:
    """The plan, or PlanError with a reason from the closed set when the trial cannot run.

    `environ` serves the task's ${VAR} templates. `network` holds the operator's network
    settings resolved against the cluster (the FQDN backend above all; without it,
    NetworkPolicy enforcement without an FQDN backend) and `scheduling` its scheduling
    settings (defaults without it); `images` the Task's images by role (`status.images`:
    built or prebuilt), of which the Trial's own `spec.environment.image` wins."""
    config = task.config
    env_config = config.environment
    images = images or {}
    image = spec.environment.image or images.get("environment") or env_config.docker_image
    if not image:
        raise PlanError(
            "TaskInvalid",
            "environment.docker_image: the task has none and the Trial sets no "
            "spec.environment.image; building images from environment/Dockerfile is not "
            "supported yet: build and push the image, then set docker_image",
        )
    if env_config.os != "linux":
        raise PlanError("TaskInvalid", "environment.os: only linux tasks can run on Kubernetes")
    steps: list[str | None] = list(task.step_names()) if task.is_multi_step else [None]
    trial_net = _network(task, spec, steps, network or NetworkSettings())
    try:
        container_env = resolve_env_templates(env_config.env, environ)
        solution_env = resolve_env_templates(config.solution.env, environ)
    except ValueError as e:
        raise PlanError("TaskInvalid", str(e)) from e
    container_env.update({v.name: v.value for v in spec.environment.env})
    environment = PodPlan(
        image=image,
        image_pull_policy=spec.environment.image_pull_policy or "IfNotPresent",
        workdir=env_config.workdir,
        container_env=container_env,
        cpus=spec.environment.override_cpus or env_config.cpus,
        memory_mb=spec.environment.override_memory_mb or env_config.memory_mb,
        storage_mb=spec.environment.override_storage_mb or env_config.storage_mb,
        accelerators=_accelerators(env_config, "environment"),
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
            raise PlanError("TrialInvalid", f"spec.artifacts: {e}") from e
        i = None if step is None else index
        verifier_env = _resolved(settings.verifier_env, environ)
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
        phases.append(agent_phase(task, spec, step, i, agent_user, agent_timeout, solution_env))
        verifier_timeout = effective_timeout(
            settings.verifier_timeout_sec,
            override=spec.verifier.override_timeout_sec,
            max_timeout=spec.verifier.max_timeout_sec,
            multiplier=spec.verifier_timeout_multiplier or spec.timeout_multiplier,
        )
        step_plan = _step_plan(task, spec, step, settings, environment, environ, images)
        step_plans.append(step_plan)
        if step_plan.verifier_mode == "separate":
            phases.append(collect_phase(settings.collect, settings.artifacts, step, i))
            phases.append(verifier_environment_phase(step, i))
        phases.append(
            verifier_phase(task, step, i, _user(settings.verifier_user), verifier_timeout,
                           verifier_env, settings.collect, step_plan)
        )
        previous_shared = step_plan.verifier_mode == "shared"
    start_timeout = (spec.environment.build_timeout_sec or env_config.build_timeout_sec) * (
        spec.timeout_multiplier
    )
    return TrialPlan(
        environment=environment,
        start_timeout_sec=start_timeout,
        phases=tuple(_with_network(p if p.id else _with_id(p), trial_net) for p in phases),
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
        log_limit_bytes=(scheduling or SchedulingSettings()).log_limit_bytes,
    )


def _with_network(phase: PhaseSpec, network: TrialNetwork) -> PhaseSpec:
    from dataclasses import replace

    return replace(phase, network=network.phase_key(phase.name, phase.step, phase.pod))


def _network(task: LoadedTask, spec: TrialSpec, steps: list[str | None],
             settings: NetworkSettings) -> TrialNetwork:
    """The policies of every step (Harbor §a.5, with the Trial's extra hosts), refused before
    any pod starts when a restricted policy could not be enforced: never run open."""
    extra = spec.network.extra_allowed_hosts
    plans = {}
    for step in steps:
        try:
            plans[step] = resolve_network_plan(
                task.config, step,
                extra_environment_hosts=extra.environment,
                extra_agent_hosts=extra.agent,
                extra_verifier_hosts=extra.verifier,
            )
        except TaskFormatError as e:
            option = (e.field or "extra_environment_hosts").split("_")[1]
            raise PlanError(
                "TrialInvalid", f"spec.network.extraAllowedHosts.{option}: {e.reason}"
            ) from e
    try:
        check_enforceable(phases_by_description(plans), settings.fqdn_backend)
    except UnenforceablePolicy as e:
        raise PlanError("NetworkPolicyUnenforceable", e.message) from e
    return trial_network(plans)


def _accelerators(config: EnvironmentConfig, where: str) -> Accelerators:
    try:
        return resolve_accelerators(config)
    except AcceleratorError as e:
        field_ = e.field.replace("environment", where, 1)
        raise PlanError("TaskInvalid", f"{field_}: {e.message}") from e


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


def _resolved(env: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    try:
        return resolve_env_templates(env, environ)
    except ValueError as e:
        raise PlanError("TaskInvalid", str(e)) from e


def _step_plan(task: LoadedTask, spec: TrialSpec, step: str | None, settings: StepSettings,
               environment: PodPlan, environ: Mapping[str, str],
               images: Mapping[str, str]) -> StepPlan:
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
                "TaskInvalid",
                f"{where}/Dockerfile: the separate verifier's image must be built from a "
                "Dockerfile, which this Shipyard version cannot do yet; set "
                "[verifier.environment].docker_image to a prebuilt image",
            )
        image = spec.environment.image or environment.image
    env = _resolved(verifier.config.env, environ)
    pod = PodPlan(
        image=image,
        image_pull_policy=environment.image_pull_policy,
        workdir=verifier.config.workdir,
        container_env=env,
        cpus=verifier.config.cpus,
        memory_mb=verifier.config.memory_mb,
        storage_mb=verifier.config.storage_mb,
        accelerators=_accelerators(verifier.config, "verifier.environment"),
    )
    return StepPlan(step, "separate", min_reward, pod, verifier.bundled_tests)


def _user(user: str | int | None) -> str | None:
    return None if user is None else str(user)


def _dirs_prepare() -> str:
    dirs = " ".join(LOG_DIRS)
    return f"mkdir -p {dirs} && chmod 777 {dirs}\n"


def environment_phase(task: LoadedTask, workdir: str | None) -> PhaseSpec:
    """Harbor's ensure_dirs, plus the environment/ files for a prebuilt image (§b.3 2.2)."""
    prepare = _dirs_prepare()
    files = task.tree("environment/")
    built = "Dockerfile" in files or "docker-compose.yaml" in files
    payload = {} if built else {f"environment/{k}": v for k, v in files.items()}
    if payload:
        target = shlex.quote(workdir) if workdir else '"$(pwd)"'
        prepare += f"mkdir -p {target} && cp -a {PAYLOAD}/environment/. {target}/\n"
    return PhaseSpec(name="environment", id="environment", command="true", prepare=prepare,
                     payload=payload)


def healthcheck_phase(check: HealthcheckConfig, step: str | None, user: str | None,
                      id_: str) -> PhaseSpec:
    """Harbor's healthcheck loop (`environments/base.py:1560-1612`), run inside the pod."""
    script = f"""start=$(date +%s)
failures=0
while :; do
  if timeout {int(check.timeout_sec)} sh -c {shlex.quote(check.command)}; then exit 0; fi
  if [ $(( $(date +%s) - start )) -lt {int(check.start_period_sec)} ]; then
    sleep {check.start_interval_sec}
    continue
  fi
  failures=$((failures + 1))
  if [ "$failures" -ge {check.retries} ]; then
    echo {shlex.quote(f"Healthcheck failed after {check.retries} consecutive retries: "
                      f"{check.command}")} >&2
    exit 1
  fi
  sleep {check.interval_sec}
done
"""
    return PhaseSpec(name="healthcheck", id=id_, step=step, user=user, command=script)


def setup_phase(task: LoadedTask, step: str, index: int, user: str | None,
                previous_shared: bool) -> PhaseSpec:
    """Harbor's `_prepare_step`: reset /logs/agent (and the shared verifier's leftovers),
    upload the step's workdir/ into the working directory, run its setup.sh there."""
    prepare = "rm -rf /logs/agent && mkdir -p /logs/agent && chmod 777 /logs/agent\n"
    if previous_shared:
        prepare += ("rm -rf /logs/verifier /tests && mkdir -p /logs/verifier "
                    "&& chmod 777 /logs/verifier\n")
    files = task.workdir_files(step)
    payload = {f"workdir/{k}": v for k, v in files.items()}
    if files:
        prepare += f'cp -a {PAYLOAD}/workdir/. "$(pwd)"/\n'
        if user is not None:
            names = " ".join(shlex.quote(n.split("/")[0]) for n in sorted(files))
            prepare += f"(cd \"$(pwd)\" && chown -R {shlex.quote(user)} {names}) || true\n"
    command = "if [ -f setup.sh ]; then bash ./setup.sh; fi\n" if "setup.sh" in files else "true\n"
    return PhaseSpec(name="setup", id=phase_id("setup", index), step=step, user=user,
                     command=command, prepare=prepare, payload=payload)


def agent_phase(
    task: LoadedTask,
    spec: TrialSpec,
    step: str | None,
    index: int | None,
    user: str | None,
    timeout: float | None,
    solution_env: dict[str, str],
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
            raise PlanError("TaskInvalid", f"{where}/solve.sh: the oracle agent needs a "
                                           "solution script and the task has none")
        prepare = (
            f"rm -rf /solution && mkdir -p /solution && cp -a {PAYLOAD}/solution/. /solution/ "
            f"&& chmod +x /solution/{shlex.quote(script)}\n"
        )
        log = AGENT_LOGS["oracle"]
        command = (
            f"(/solution/{shlex.quote(script)}) > {log} 2>&1\n"
            "rc=$?\n"
            'if [ "$rc" -ne 0 ]; then echo "$rc" > /logs/agent/exit-code.txt; fi\n'
            'exit "$rc"\n'
        )
        # [solution].env wins over the agent's env (§d.4).
        env = {v.name: v.value for v in agent.env}
        env.update({"DEBIAN_FRONTEND": "noninteractive", **solution_env})
        return PhaseSpec(
            command=command, env=env, prepare=prepare,
            payload={f"solution/{k}": v for k, v in files.items()},
            collect=(log, "/logs/agent/exit-code.txt"), secrets=bool(agent.env_from),
            log_files=(log,), oracle=True, **base,
        )
    if not agent.command:
        raise PlanError("TrialInvalid", "spec.agent.command: required when spec.agent.name is "
                                        "'command'")
    log = AGENT_LOGS["command"]
    instruction = task.step_instruction(step) if step else task.instruction
    prepare = f"cp {PAYLOAD}/instruction.md {INSTRUCTION_PATH} && chmod 644 {INSTRUCTION_PATH}\n"
    env = {v.name: v.value for v in agent.env}
    env["SHIPYARD_INSTRUCTION_FILE"] = INSTRUCTION_PATH
    command = (
        f'SHIPYARD_INSTRUCTION="$(cat {INSTRUCTION_PATH})"\n'
        "export SHIPYARD_INSTRUCTION\n"
        f"({agent.command}\n) > {log} 2>&1\n"
    )
    return PhaseSpec(
        command=command, env=env, prepare=prepare,
        payload={"instruction.md": instruction.encode()},
        collect=(log,), secrets=bool(agent.env_from), log_files=(log,), **base,
    )


ARTIFACTS_STAGE = "/shipyard/artifacts-stage"


def _stage_artifact(artifact: ArtifactConfig) -> str:
    """Shell that copies one artifact into the stage at its own path. A directory is packed
    from inside (`-C DIR .`) with its `exclude` patterns, exactly as Harbor's `tar --exclude`."""
    rel = artifact.source.strip("/")
    parent, _, name = rel.rpartition("/")
    excludes = "".join(f" --exclude={shlex.quote(x)}" for x in artifact.exclude)
    src, stage = shlex.quote("/" + rel), shlex.quote(f"{ARTIFACTS_STAGE}/{rel}")
    stage_parent = shlex.quote(f"{ARTIFACTS_STAGE}/{parent}")
    listed = f" && echo {shlex.quote(rel)} >> {ARTIFACTS_TAR}.list"
    return (
        f"if [ -d {src} ]; then mkdir -p {stage} && tar -c -f - -C {src}{excludes} . "
        f"| tar -x -f - -C {stage}{listed}\n"
        f"elif [ -e {src} ]; then mkdir -p {stage_parent} && tar -c -f - -C "
        f"{shlex.quote('/' + parent)} {shlex.quote(name)} | tar -x -f - -C {stage_parent}{listed}"
        "\nfi\n"
    )


def collect_phase(hooks: list[VerifierCollectConfig], artifacts: list[ArtifactConfig],
                  step: str | None, index: int | None) -> PhaseSpec:
    """Before a separate verifier: collect hooks, then the artifacts packed for the verifier
    pod (best effort, as Harbor's collection never fails a trial)."""
    main = [a for a in artifacts if a.effective_service == "main" and a.source.strip("/")]
    command = "".join(_collect_hook(h) for h in hooks)
    command += f"rm -rf {ARTIFACTS_STAGE} {ARTIFACTS_TAR} && mkdir -p {ARTIFACTS_STAGE}\n"
    command += f": > {ARTIFACTS_TAR}.list\n"
    command += "".join(_stage_artifact(a) for a in main)
    command += (
        f"tar -c -f {ARTIFACTS_TAR} -C {ARTIFACTS_STAGE} -T {ARTIFACTS_TAR}.list 2>/dev/null "
        f"|| tar -c -f {ARTIFACTS_TAR} -T /dev/null\n"
        f"rm -rf {ARTIFACTS_STAGE}\n"
        "exit 0\n"
    )
    return PhaseSpec(name="collect", id=phase_id("collect", index), step=step, command=command)


def verifier_environment_phase(step: str | None, index: int | None) -> PhaseSpec:
    """The separate verifier pod's setup: log dirs, an empty /logs/verifier, and the agent
    environment's artifacts re-materialized at their original paths. The driver adds the
    artifacts tar to the payload when it launches this phase."""
    prepare = _dirs_prepare() + (
        f"if [ -s {PAYLOAD}/artifacts.tar ]; then tar -x -f {PAYLOAD}/artifacts.tar -C / "
        "--no-same-owner; fi\n"
    )
    return PhaseSpec(name="verifier-environment", id=phase_id("verifier-environment", index),
                     step=step, pod="verifier", command="true", prepare=prepare)


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
    prepare = "" if separate else "".join(_collect_hook(h) for h in collect_hooks)
    prepare += f"rm -f -- {REWARD_TXT} {REWARD_JSON}\n"
    payload: dict[str, bytes] = {}
    if not step_plan.bundled_tests:
        prepare += (f"rm -rf /tests && mkdir -p /tests && cp -a {PAYLOAD}/tests/. /tests/\n")
        payload = {f"tests/{k}": v for k, v in task.test_files(step).items()}
    prepare += f"chmod +x /tests/{shlex.quote(script)}\n"
    cwd = step_plan.verifier_pod.workdir if separate and step_plan.verifier_pod else (
        task.config.environment.workdir)
    return PhaseSpec(
        name="verifier",
        id=phase_id("verifier", index),
        step=step,
        pod="verifier" if separate else "env",
        command=f"(/tests/{shlex.quote(script)}) > {TEST_STDOUT} 2>&1\n",
        user=user,
        timeout_sec=timeout,
        cwd=cwd,
        env=env,
        prepare=prepare,
        payload=payload,
        collect=(REWARD_JSON, REWARD_TXT, TEST_STDOUT),
        log_files=(TEST_STDOUT,),
    )


def _collect_hook(hook: VerifierCollectConfig) -> str:
    run = f"timeout {int(hook.timeout_sec)} bash -lc {shlex.quote(hook.command)}"
    if hook.user is not None:
        run = f"su -s /bin/sh {shlex.quote(str(hook.user))} -c {shlex.quote(run)}"
    return f"{run} || echo 'collect hook failed (ignored)' >&2\n"


def log_key(phase: PhaseSpec) -> str:
    """The phase's key in the logs ConfigMap: `agent.log`, or `<step>.agent.log`."""
    kind = "agent" if phase.name == "agent" else "verifier"
    if phase.step is None:
        return f"{kind}.log"
    step = re.sub(r"[^-._a-zA-Z0-9]+", "_", phase.step)
    return f"{step}.{kind}.log"
