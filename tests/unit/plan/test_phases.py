"""Task + Trial → the plan of phases a single-step trial runs (docs/harbor.md §b.3, §d.4)."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

from shipyard.plan.phases import (
    INSTRUCTION_PATH,
    REWARD_JSON,
    REWARD_TXT,
    TEST_STDOUT,
    PhaseSpec,
    PlanError,
    TrialPlan,
)
from shipyard.render.phase_bundle import build_phase_bundle
from shipyard.render.phase_scripts import phase_scripts as scripts
from tests.unit.helpers import HELLO_TOML, hello_world, plan_for, task


def plan_error(toml: str = HELLO_TOML, environ: dict[str, str] | None = None,
               extra: dict[str, str] | None = None, **spec: Any) -> PlanError:
    with pytest.raises(PlanError) as info:
        plan_for(task(toml, extra=extra), environ=environ, **spec)
    return info.value


def with_toml(*sections: str) -> str:
    """HELLO_TOML plus more TOML (sections merged by hand where they repeat)."""
    return HELLO_TOML + "\n" + "\n".join(sections)


def phase_text(phase: PhaseSpec) -> str:
    """Everything of a phase that is not its payload: what goes on files other than payload/."""
    shell = scripts(phase)
    return "\n".join([shell.command, shell.prepare or "", *phase.env.keys(), *phase.env.values()])


# ---------------------------------------------------------------- the shape of a plan


def test_hello_world_oracle_plan() -> None:
    plan = plan_for(hello_world(), agent={"name": "oracle"})
    assert [p.name for p in plan.phases] == ["environment", "agent", "verifier"]
    pod = plan.environment
    assert (pod.image, pod.image_pull_policy, pod.workdir) == (
        "localhost/shipyard/debian:bookworm", "IfNotPresent", "/app")
    assert plan.start_timeout_sec == 600
    assert plan.secret_names == ()


def test_environment_phase_makes_the_log_dirs_world_writable_and_sticky() -> None:
    env = plan_for().phase("environment")
    assert "mkdir -p /logs/verifier /logs/agent /logs/artifacts" in scripts(env).prepare
    assert "chmod 1777 /logs/verifier /logs/agent /logs/artifacts" in scripts(env).prepare
    assert (env.user, env.timeout_sec, env.payload) == (None, None, {})


def test_environment_files_of_a_prebuilt_image_are_copied_into_workdir() -> None:
    """docs/harbor.md §b.3: a prebuilt image with no Dockerfile gets environment/ uploaded."""
    env = plan_for(task(extra={"environment/data/seed.txt": "42\n"})).phase("environment")
    assert env.payload == {"environment/data/seed.txt": b"42\n"}
    assert "/app" in scripts(env).prepare


def test_environment_files_are_not_uploaded_when_the_task_has_a_dockerfile() -> None:
    """Harbor uploads environment/ only "for a prebuilt image with no Dockerfile/compose"
    (docs/harbor.md §b.3, §f); the Dockerfile and its build context never land in workdir."""
    loaded = task(extra={"environment/Dockerfile": "FROM python:3.12-slim\n",
                         "environment/requirements.txt": "pytest\n"})
    env = plan_for(loaded).phase("environment")
    assert env.payload == {}


@pytest.mark.parametrize("agent", ["oracle", "nop"])
def test_verifier_phase_runs_test_sh_after_removing_stale_rewards(agent: str) -> None:
    verifier = plan_for(agent={"name": agent}).phase("verifier")
    assert scripts(verifier).command.startswith(f"(/tests/test.sh) > {TEST_STDOUT} 2>&1")
    assert f"rm -rf -- {REWARD_TXT} {REWARD_JSON}" in scripts(verifier).prepare
    assert scripts(verifier).prepare.index("rm -rf --") < scripts(verifier).prepare.index("cp -a")
    assert verifier.collect == (REWARD_JSON, REWARD_TXT, TEST_STDOUT,
                                "/logs/verifier/test-stderr.txt", "/logs/verifier/ctrf.json",
                                "/logs/verifier/")
    assert verifier.log_files == (TEST_STDOUT, "/logs/verifier/test-stderr.txt",
                                  "/logs/verifier/ctrf.json", "/logs/verifier/")
    assert verifier.secrets is False


def test_collect_hooks_run_before_the_rewards_are_reset() -> None:
    plan = plan_for(task(with_toml(
        '[[verifier.collect]]\ncommand = "cp -r /app/out /logs/artifacts/"\nuser = "agent"\n')))
    prepare = scripts(plan.phase("verifier")).prepare
    assert prepare.index("cp -r /app/out") < prepare.index("rm -rf --")
    assert "timeout 60 bash -lc" in prepare
    assert "su -s /bin/sh agent" in prepare
    assert "(ignored)" in prepare  # best effort, as in Harbor


def test_a_shared_verifier_packs_every_artifact_after_its_hooks_and_before_its_tests() -> None:
    """Harbor collects artifacts after the collect hooks and before verification, for every
    trial (issue 26): a shared verifier's root prepare packs them where only root writes."""
    toml = 'artifacts = ["/app/answer.txt", {source = "/var/db", service = "db"}]\n' + \
        with_toml('[[verifier.collect]]\ncommand = "cp -r /app/out /logs/artifacts/"\n')
    plan = plan_for(task(toml), artifacts=[{"source": "/app/extra/", "destination": "x"}])
    assert [p.name for p in plan.phases] == ["environment", "agent", "verifier"]
    verifier = plan.phase("verifier")
    assert [a.source for a in verifier.script.artifacts] == [
        "/logs/artifacts", "/app/answer.txt", "/app/extra/"]  # the main container's only
    assert [a.source for a in plan.steps[0].artifacts] == [
        "/logs/artifacts", "/app/answer.txt", "/var/db", "/app/extra/"]  # the manifest's rows
    prepare = scripts(verifier).prepare
    pack = prepare.index("/shipyard/state/artifacts.tar")
    assert prepare.index("cp -r /app/out") < pack < prepare.index("rm -rf -- ")
    assert ") || true\n" in prepare  # best effort: never fails the verifier


def test_a_task_without_declared_artifacts_still_packs_the_convention_folder() -> None:
    verifier = plan_for().phase("verifier")
    assert [a.source for a in verifier.script.artifacts] == ["/logs/artifacts"]
    assert "logs/artifacts" in scripts(verifier).prepare


# ---------------------------------------------------------------- what reaches the pod, when


def test_oracle_uploads_the_solution_only_with_the_agent_phase() -> None:
    plan = plan_for(agent={"name": "oracle"})
    uploads = {p.name: sorted(p.payload) for p in plan.phases}
    assert uploads == {
        "environment": [],
        "agent": ["solution/solve.sh"],
        "verifier": ["tests/test.sh"],
    }


def test_tests_never_reach_the_pod_before_verification() -> None:
    loaded = task(extra={"tests/data/expected.txt": "hello\n"})
    for name in ("oracle", "nop"):
        plan = plan_for(loaded, agent={"name": name})
        early = [k for p in plan.phases if p.name != "verifier" for k in p.payload]
        assert not [k for k in early if k.startswith("tests/")]
        assert sorted(plan.phase("verifier").payload) == ["tests/data/expected.txt",
                                                          "tests/test.sh"]


def test_oracle_runs_solve_sh_into_oracle_txt_and_records_a_non_zero_exit() -> None:
    agent = plan_for(agent={"name": "oracle"}).phase("agent")
    assert "rm -rf /solution" in scripts(agent).prepare
    # solve.sh arrives executable (`*.sh` in a bundle is 0755); another script is made so.
    assert "chmod" not in scripts(agent).prepare
    with tarfile.open(fileobj=io.BytesIO(build_phase_bundle("agent", agent))) as tar:
        assert tar.getmember("payload/solution/solve.sh").mode == 0o755
    assert scripts(agent).command.startswith("(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1")
    assert "/logs/agent/exit-code.txt" in scripts(agent).command
    assert agent.env["DEBIAN_FRONTEND"] == "noninteractive"
    assert "/logs/agent/oracle.txt" in agent.collect
    assert agent.log_files == ("/logs/agent/oracle.txt",)


def test_oracle_without_a_solution_is_task_invalid() -> None:
    with pytest.raises(PlanError) as info:
        plan_for(task(drop=("solution/solve.sh",)), agent={"name": "oracle"})
    assert info.value.reason == "TaskInvalid"
    assert "solution/solve.sh" in info.value.message


def test_oracle_solution_env_is_resolved_and_wins_over_the_agent_env() -> None:
    """docs/harbor.md §d.4: `[solution].env` (templates resolved) is scoped on top of the agent's
    extra env, so the task's solution settings win."""
    plan = plan_for(
        task(with_toml('[solution.env]\nSOL = "task"\nFROM_HOST = "${HOST_VALUE}"\n')),
        environ={"HOST_VALUE": "resolved"},
        agent={"name": "oracle", "env": [{"name": "SOL", "value": "trial"},
                                         {"name": "OTHER", "value": "kept"}]},
    )
    env = plan.phase("agent").env
    assert env["FROM_HOST"] == "resolved"
    assert env["OTHER"] == "kept"
    assert env["SOL"] == "task"


def test_nop_agent_does_nothing_and_uploads_nothing() -> None:
    agent = plan_for(agent={"name": "nop"}).phase("agent")
    shell = scripts(agent)
    assert (shell.command, shell.prepare, agent.payload, agent.collect) == ("true", None, {}, ())
    assert agent.timeout_sec == 120


def test_command_agent_gets_the_instruction_as_a_file_never_in_its_command() -> None:
    loaded = task(extra={"instruction.md": "Secret plan: write 'hello' to /app/hello.txt\n"})
    agent = plan_for(loaded, agent={"name": "command", "command": "my-agent --go"}).phase("agent")
    assert agent.payload == {"instruction.md": loaded.instruction.encode()}
    assert "Secret plan" not in phase_text(agent)
    assert INSTRUCTION_PATH in scripts(agent).prepare
    assert agent.env["SHIPYARD_INSTRUCTION_FILE"] == INSTRUCTION_PATH
    assert "SHIPYARD_INSTRUCTION=" in scripts(agent).command  # exported from the file, in the pod
    assert "my-agent --go" in scripts(agent).command
    assert agent.collect == ("/logs/agent/command.txt",)


def test_command_agent_without_a_command_is_trial_invalid() -> None:
    error = plan_error(agent={"name": "command"})
    assert error.reason == "TrialInvalid"
    assert "spec.agent.command" in error.message


def test_agent_env_from_secrets_is_for_the_agent_phase_only() -> None:
    plan = plan_for(agent={"name": "command", "command": "run",
                           "envFrom": [{"secretRef": {"name": "openai"}},
                                       {"secretRef": {"name": "anthropic"}}]})
    assert plan.secret_names == ("openai", "anthropic")
    assert {p.name: p.secrets for p in plan.phases} == {
        "environment": False, "agent": True, "verifier": False}


# ---------------------------------------------------------------- users and timeouts


def test_agent_and_verifier_users_come_from_the_task() -> None:
    plan = plan_for(task(HELLO_TOML.replace(
        "[agent]\n", '[agent]\nuser = "agent"\n').replace(
        "[verifier]\n", "[verifier]\nuser = 1001\n")))
    assert plan.phase("agent").user == "agent"
    assert plan.phase("verifier").user == "1001"
    assert plan.phase("environment").user is None
    assert plan.phase("agent").cwd == plan.phase("verifier").cwd == "/app"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, 120),
        ({"timeoutMultiplier": 2}, 240),
        ({"agentTimeoutMultiplier": 3, "timeoutMultiplier": 2}, 360),
        ({"agent": {"overrideTimeoutSec": 30}}, 30),
        ({"agent": {"maxTimeoutSec": 50}}, 50),
        ({"agent": {"overrideTimeoutSec": 300, "maxTimeoutSec": 200}}, 200),
        ({"agent": {"maxTimeoutSec": 500}, "timeoutMultiplier": 0.5}, 60),
        ({"agent": {"overrideTimeoutSec": 10}, "verifierTimeoutMultiplier": 9}, 10),
    ],
)
def test_agent_timeout_is_min_of_override_or_task_and_max_times_multiplier(
    spec: dict[str, Any], expected: float
) -> None:
    assert plan_for(**spec).phase("agent").timeout_sec == expected


def test_agent_without_a_task_timeout_runs_unbounded_unless_overridden() -> None:
    unbounded = task(HELLO_TOML.replace("timeout_sec = 120.0\n", "", 1))
    assert plan_for(unbounded, timeoutMultiplier=3).phase("agent").timeout_sec is None
    assert plan_for(unbounded, agent={"maxTimeoutSec": 9}).phase("agent").timeout_sec is None
    assert plan_for(unbounded, agent={"overrideTimeoutSec": 9}).phase("agent").timeout_sec == 9


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, 60),
        ({"timeoutMultiplier": 2}, 120),
        ({"verifierTimeoutMultiplier": 0.5, "timeoutMultiplier": 4}, 30),
        ({"verifier": {"overrideTimeoutSec": 15}}, 15),
        ({"verifier": {"maxTimeoutSec": 20}, "agentTimeoutMultiplier": 9}, 20),
    ],
)
def test_verifier_timeout_follows_the_same_rules(spec: dict[str, Any], expected: float) -> None:
    assert plan_for(**spec).phase("verifier").timeout_sec == expected


def test_verifier_timeout_defaults_to_harbors_600_seconds() -> None:
    plan = plan_for(task(HELLO_TOML.replace("timeout_sec = 60.0\n", "")))
    assert plan.phase("verifier").timeout_sec == 600


@pytest.mark.parametrize(
    ("toml_line", "spec", "expected"),
    [
        ("", {}, 600),
        ("", {"timeoutMultiplier": 2}, 1200),
        ("build_timeout_sec = 90.0\n", {}, 90),
        ("build_timeout_sec = 90.0\n", {"environment": {"buildTimeoutSec": 30}}, 30),
    ],
)
def test_environment_start_timeout(toml_line: str, spec: dict[str, Any], expected: float
                                   ) -> None:
    loaded = task(HELLO_TOML.replace("[environment]\n", f"[environment]\n{toml_line}"))
    assert plan_for(loaded, **spec).start_timeout_sec == expected


# ---------------------------------------------------------------- environment variables


def test_verifier_env_is_the_task_env_overlaid_by_the_trial_env() -> None:
    loaded = task(HELLO_TOML.replace(
        "[verifier]\n", '[verifier]\nenv = { GRADER = "strict", MODE = "task" }\n'))
    plan = plan_for(loaded, verifier={"env": [{"name": "MODE", "value": "trial"},
                                              {"name": "EXTRA", "value": "1"}]})
    assert plan.phase("verifier").env == {"GRADER": "strict", "MODE": "trial", "EXTRA": "1"}


def test_container_env_is_the_task_env_overlaid_by_the_trial_env() -> None:
    loaded = task(HELLO_TOML + '\n[environment.env]\nA = "task"\nB = "task"\n')
    plan = plan_for(loaded, environment={"env": [{"name": "B", "value": "trial"}]})
    assert plan.environment.container_env == {"A": "task", "B": "trial"}


@pytest.mark.parametrize(
    ("value", "environ", "expected"),
    [
        ("${GRADER_KEY}", {"GRADER_KEY": "k-1"}, "k-1"),
        ("${GRADER_KEY:-fallback}", {}, "fallback"),
        ("${GRADER_KEY:-fallback}", {"GRADER_KEY": "set"}, "set"),
        ("Bearer ${GRADER_KEY}", {}, "Bearer ${GRADER_KEY}"),  # only whole values resolve
    ],
)
def test_env_templates_resolve_from_the_given_environ(value: str, environ: dict[str, str],
                                                      expected: str) -> None:
    toml = HELLO_TOML.replace("[verifier]\n", f'[verifier]\nenv = {{ K = "{value}" }}\n')
    toml += f'\n[environment.env]\nK = "{value}"\n'
    plan = plan_for(task(toml), environ=environ)
    assert plan.phase("verifier").env["K"] == expected
    assert plan.environment.container_env["K"] == expected


@pytest.mark.parametrize(
    "toml",
    [
        HELLO_TOML.replace("[verifier]\n", '[verifier]\nenv = { K = "${MISSING_VAR}" }\n'),
        HELLO_TOML + '\n[environment.env]\nK = "${MISSING_VAR}"\n',
        HELLO_TOML + '\n[solution.env]\nK = "${MISSING_VAR}"\n',
    ],
    ids=["verifier", "environment", "solution"],
)
def test_missing_template_variable_is_task_invalid(toml: str, request: pytest.FixtureRequest
                                                   ) -> None:
    """Named by file and field, with Harbor's reason and where Shipyard looks for the value."""
    error = plan_error(toml, environ={"OTHER": "x"})
    assert error.reason == "TaskInvalid"
    table = request.node.callspec.id
    assert error.message.startswith(
        f"task.toml: {table}.env.K: Environment variable 'MISSING_VAR' not found in host "
        "environment (Shipyard resolves ${MISSING_VAR} from the operator's environment")


def test_trial_env_values_are_taken_literally() -> None:
    """A Trial author must not be able to read the operator's environment through `${...}`."""
    plan = plan_for(environ={"OPERATOR_SECRET": "s3cr3t"},
                    verifier={"env": [{"name": "V", "value": "${OPERATOR_SECRET}"}]},
                    environment={"env": [{"name": "E", "value": "${OPERATOR_SECRET}"}]},
                    agent={"name": "nop", "env": [{"name": "A", "value": "${OPERATOR_SECRET}"}]})
    assert plan.phase("verifier").env["V"] == "${OPERATOR_SECRET}"
    assert plan.environment.container_env["E"] == "${OPERATOR_SECRET}"


# ---------------------------------------------------------------- image and resources


def test_task_without_docker_image_is_refused_with_a_clear_message() -> None:
    loaded = task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', ""),
                  extra={"environment/Dockerfile": "FROM python:3.12-slim\n"})
    with pytest.raises(PlanError) as info:
        plan_for(loaded)
    assert info.value.reason == "TaskInvalid"
    assert "docker_image" in info.value.message
    assert "Dockerfile" in info.value.message


def test_trial_image_overrides_or_replaces_the_task_image() -> None:
    no_image = task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', ""),
                    extra={"environment/Dockerfile": "FROM python:3.12-slim\n"})
    assert plan_for(no_image, environment={"image": "mine:1"}).environment.image == "mine:1"
    assert plan_for(environment={"image": "mine:2"}).environment.image == "mine:2"
    pulled = plan_for(environment={"imagePullPolicy": "Always"}).environment
    assert pulled.image_pull_policy == "Always"


def test_resources_come_from_the_task_with_trial_overrides() -> None:
    loaded = task(HELLO_TOML + "cpus = 2\nmemory_mb = 4096\nstorage_mb = 10240\n")
    pod = plan_for(loaded).environment
    assert (pod.cpus, pod.memory_mb, pod.storage_mb) == (2, 4096, 10240)
    pod = plan_for(loaded, environment={"overrideCpus": 0.5, "overrideMemoryMb": 512}).environment
    assert (pod.cpus, pod.memory_mb, pod.storage_mb) == (0.5, 512, 10240)


# ---------------------------------------------------------------- healthcheck


def test_no_healthcheck_phase_unless_the_task_configures_one() -> None:
    assert "healthcheck" not in [p.name for p in plan_for().phases]


def test_healthcheck_phase_runs_between_environment_and_agent() -> None:
    plan = plan_for(task(HELLO_TOML + '\n[environment.healthcheck]\ncommand = "test -f /ready"\n'
                         "retries = 2\ntimeout_sec = 7\n"))
    assert [p.name for p in plan.phases] == ["environment", "healthcheck", "agent", "verifier"]
    check = plan.phase("healthcheck")
    assert "timeout 7 sh -c 'test -f /ready'" in scripts(check).command
    assert ("Healthcheck failed after 2 consecutive retries: test -f /ready"
            in scripts(check).command)
    assert check.user is None  # the container's default user, as in Harbor


# ---------------------------------------------------------------- refused, never run open


@pytest.mark.parametrize(
    "network",
    [
        '\n[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n',
        '\n[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["*.example.com"]\n',
    ],
    ids=["env-hostname", "verifier-wildcard"],
)
def test_hostname_allowlist_without_fqdn_backend_is_refused(network: str) -> None:
    """Restricted policies are enforced (tests/unit/render/test_network_policy.py); hostnames
    need an FQDN backend and are refused without one rather than run open."""
    section, body = network.strip().split("\n", 1)
    toml = HELLO_TOML.replace(f"{section}\n", f"{section}\n{body}\n")
    error = plan_error(toml)
    assert error.reason == "NetworkPolicyUnenforceable"
    assert "allowed_hosts" in error.message


@pytest.mark.parametrize(
    "accelerator",
    ['tpu = { type = "v5p", topology = "2x2x2" }\n',
     'gpus = 1\ntpu = { type = "v5e", topology = "2x2" }\n'],
    ids=["multi-host-tpu", "gpu-and-tpu"],
)
def test_accelerators_no_pod_can_get_are_refused(accelerator: str) -> None:
    error = plan_error(HELLO_TOML + accelerator)
    assert error.reason == "TaskInvalid"
    assert "environment.tpu" in error.message


def test_plan_phase_lookup() -> None:
    plan: TrialPlan = plan_for()
    assert plan.phase("agent") is plan.phases[1]
    with pytest.raises(StopIteration):
        plan.phase("healthcheck")


def test_separate_verifier_collects_task_and_trial_artifacts() -> None:
    toml = 'artifacts = ["/app/answer.txt"]\n' + HELLO_TOML.replace(
        "[verifier]", '[verifier]\nenvironment_mode = "separate"')
    plan = plan_for(task(toml), artifacts=[{"source": "/app/extra/", "destination": "x"}])
    assert [p.name for p in plan.phases] == [
        "environment", "agent", "collect", "verifier-environment", "verifier"]
    collect = scripts(plan.phase("collect")).command
    for source in ("logs/artifacts", "app/answer.txt", "app/extra"):
        assert source in collect
    assert plan.phase("verifier").pod == "verifier"
    # The verifier pod's setup knows the declared paths, never extracts at /, and copies each
    # artifact from its own folder to its own path (issue 22).
    env = plan.phase("verifier-environment")
    assert env.script.artifacts == ("/logs/artifacts", "/app/answer.txt", "/app/extra/")
    prepare = scripts(env).prepare
    assert "-C /" not in prepare and "-C / " not in prepare
    assert 'tar -x -f "$SHIPYARD_PAYLOAD"/artifacts.tar -C "$SHIPYARD_PAYLOAD"/artifacts-tree' \
        in prepare
    for rel in ("logs/artifacts", "app/answer.txt", "app/extra"):
        assert f'cp -a "$SHIPYARD_PAYLOAD"/artifacts-tree/{rel}' in prepare, prepare
    # The collect phase packs where only root can write.
    assert "/shipyard/state/artifacts.tar" in scripts(plan.phase("collect")).command


def test_invalid_trial_artifact_is_trial_invalid() -> None:
    error = plan_error(artifacts=[{"source": "/app/../etc"}])
    assert error.reason == "TrialInvalid"
    assert "spec.artifacts" in error.message and ".." in error.message


def test_artifact_excludes_apply_to_directories_only() -> None:
    toml = HELLO_TOML.replace("[verifier]", '[verifier]\nenvironment_mode = "separate"')
    plan = plan_for(task(toml), artifacts=[
        {"source": "/app/out", "exclude": ["*.tmp", "cache dir"]}])
    branches = scripts(plan.phase("collect")).command.split("\n")
    directory = next(b for b in branches if b.startswith("elif [ -d /app/out ]"))
    single_file = next(b for b in branches if b.startswith("elif [ -e /app/out ]"))
    assert "-C /app/out --exclude='*.tmp' --exclude='cache dir' ." in directory
    assert "--exclude" not in single_file
    link = next(b for b in branches if b.startswith("if [ -e /app/out ]"))
    assert '"$(readlink -f /app/out)" != /app/out' in link  # a link on the path: not followed


def _spec_of(phase: PhaseSpec) -> str:
    with tarfile.open(fileobj=io.BytesIO(build_phase_bundle(phase.id, phase))) as tar:
        member = tar.extractfile("spec")
        assert member is not None
        return member.read().decode()


def test_agent_processes_keep_reaches_every_phase_s_spec_and_end_is_the_default() -> None:
    default = plan_for(hello_world(), agent={"name": "oracle"})
    assert not any("KEEP" in _spec_of(p) for p in default.phases)
    keep = plan_for(hello_world(), agent={"name": "oracle"},
                    verifier={"agentProcesses": "Keep"})
    assert [p.keep_processes for p in keep.phases] == [True, True, True]
    assert all("KEEP=1" in _spec_of(p) for p in keep.phases)
