"""Lint warnings: what Harbor ignores silently, and likely mistakes."""

from __future__ import annotations

import textwrap

import pytest

from shipyard.taskformat import (
    TaskFormatError,
    lint_config,
    lint_task,
    load_task_files,
    unknown_keys,
)

from .helpers import multi_step_files, task_files


def config_warnings(toml: str) -> list[str]:
    return [str(w) for w in lint_config(textwrap.dedent(toml))]


def test_clean_config() -> None:
    assert config_warnings("[agent]\ntimeout_sec = 60") == []


def test_unknown_keys_by_dotted_path() -> None:
    warnings = config_warnings(
        """
        colour = "blue"
        artifacts = [{ source = "/a", dest = "x" }]
        [agent]
        timeout_secs = 5
        [metadata]
        anything = "goes"
        [verifier.environment]
        docker_image = "g"
        cpu = 2
        [environment.env]
        FREE = "form"
        [[environment.mcp_servers]]
        name = "m"
        url = "http://m"
        tokens = 1
        [[steps]]
        name = "a"
        min_reward = { any = 1 }
        [steps.verifier]
        timeout = 1
        """
    )
    unknown = [w for w in warnings if w.endswith("unknown key, ignored by Harbor")]
    assert [w.split(": ")[1] for w in unknown] == [
        "colour",
        "artifacts[0].dest",
        "agent.timeout_secs",
        "verifier.environment.cpu",
        "environment.mcp_servers[0].tokens",
        "steps[0].verifier.timeout",
    ]


def test_unknown_keys_of_parsed_data() -> None:
    data = {"steps": [{"name": "a", "agnet": {}}, {"name": "b"}], "environment": {"memory": "1G"}}
    assert unknown_keys(data) == ["steps[0].agnet"]


def test_deprecated_keys() -> None:
    warnings = config_warnings(
        """
        version = "1.0"
        [environment]
        allow_internet = false
        memory = "1G"
        storage = "1G"
        """
    )
    assert warnings == [
        "task.toml: version: 'version' is the legacy name of 'schema_version'.",
        "task.toml: environment.allow_internet: The 'allow_internet' field is deprecated. Use "
        "network_mode instead.",
        "task.toml: environment.memory: The 'memory' field is deprecated. Use 'memory_mb' instead.",
        "task.toml: environment.storage: The 'storage' field is deprecated. Use 'storage_mb' "
        "instead.",
    ]


def test_artifact_overlaps() -> None:
    warnings = config_warnings(
        """
        artifacts = ["/logs/artifacts/x", { source = "/app", destination = "out" },
                     { source = "/app/sub", destination = "out/sub" }]
        """.replace("\n                     ", " ")
    )
    assert (
        "task.toml: artifacts: Artifact sources overlap: '/logs/artifacts' (service 'main') and "
        "'/logs/artifacts/x' (service 'main') map to the same location under the shared artifacts "
        "dir; on collision the first is kept and the rest are skipped at collection time."
    ) in warnings
    assert (
        "task.toml: artifacts: Artifact destinations overlap: 'out' and 'out/sub' map to the same "
        "location under the artifacts dir; on collision the first is kept and the rest are skipped."
    ) in warnings
    assert len(warnings) == 3


def test_step_artifacts_overlapping_task_artifacts() -> None:
    warnings = config_warnings(
        'artifacts = ["/app"]\n[[steps]]\nname = "a"\nartifacts = ["/app/x"]'
    )
    assert len(warnings) == 1 and "'/app' (service 'main') and '/app/x'" in warnings[0]


def test_strategy_on_single_step() -> None:
    assert config_warnings('multi_step_reward_strategy = "final"') == [
        "task.toml: multi_step_reward_strategy: ignored: this is a single-step task"
    ]


def test_step_verifier_timeout_quirk() -> None:
    warnings = config_warnings(
        """
        [verifier]
        timeout_sec = 1200
        [[steps]]
        name = "a"
        [[steps]]
        name = "b"
        [steps.verifier]
        timeout_sec = 30
        """
    )
    assert warnings == [
        "task.toml: steps[0].verifier.timeout_sec: not set: Harbor gives this step's verifier "
        "600 s, not [verifier].timeout_sec = 1200 s; set it on the step"
    ]


def test_lint_config_raises_on_errors() -> None:
    with pytest.raises(TaskFormatError):
        lint_config("[environment]\nos = 1")


def task_warnings(files: dict[str, bytes]) -> list[str]:
    return [str(w) for w in lint_task(load_task_files(files, "t"))]


def test_clean_task() -> None:
    assert task_warnings(task_files()) == []


def test_rewards_json_typo() -> None:
    files = task_files(extra={"tests/test.sh": "echo '{}' > /logs/verifier/rewards.json"})
    assert task_warnings(files) == [
        "tests/test.sh: mentions 'rewards.json', but Harbor reads /logs/verifier/reward.json "
        "(or reward.txt)"
    ]


def test_missing_environment_and_solution() -> None:
    files = task_files()
    del files["environment/Dockerfile"], files["solution/solve.sh"]
    assert task_warnings(files) == [
        "environment/: missing, and [environment].docker_image is not set: there is nothing to "
        "build or run",
        "solution/: no solve script: the oracle agent cannot run",
    ]
    files["task.toml"] = b'[environment]\ndocker_image = "python:3.12"'
    assert len(task_warnings(files)) == 1


def test_multi_step_files() -> None:
    files = multi_step_files('[[steps]]\nname = "a"\n[[steps]]\nname = "b"', ["a", "b"])
    files.update(
        {
            "instruction.md": b"unused",
            "steps/a/solution/solve.sh": b"",
            "steps/old/instruction.md": b"",
            "task.toml": files["task.toml"] + b"\n[agent]\ntimeout_sec = 60\n",
        }
    )
    assert task_warnings(files) == [
        "instruction.md: ignored by multi-step tasks",
        "steps/b/solution/: no solve script for this step: the oracle agent cannot run it",
        "steps/old/: not declared in [[steps]], ignored",
    ]


@pytest.mark.parametrize(("toml", "field"), [
    ("[agent]\ntimeout_sec = -5\n", "agent.timeout_sec"),
    ("[agent]\ntimeout_sec = 0\n", "agent.timeout_sec"),
    ("[verifier]\ntimeout_sec = 0\n", "verifier.timeout_sec"),
    ("[environment]\nbuild_timeout_sec = -1\n", "environment.build_timeout_sec"),
    ("[environment]\nmemory_mb = 0\n", "environment.memory_mb"),
    ("[environment]\ncpus = -1\n", "environment.cpus"),
    ("[environment]\nstorage_mb = -10\n", "environment.storage_mb"),
    ("[environment.healthcheck]\ncommand = 'true'\ninterval_sec = 0\n",
     "environment.healthcheck.interval_sec"),
    ("[[verifier.collect]]\ncommand = 'true'\ntimeout_sec = 0\n",
     "verifier.collect[0].timeout_sec"),
])
def test_non_positive_timeouts_and_sizes_are_refused_naming_the_field(toml: str,
                                                                      field: str) -> None:
    from shipyard.taskformat import TaskFormatError, load_task_config

    with pytest.raises(TaskFormatError) as caught:
        load_task_config(toml, "task.toml")
    errors = caught.value.errors
    assert [e.field for e in errors] == [field], errors
    assert errors[0].file == "task.toml"
    assert "greater than 0" in errors[0].reason, errors


def test_a_copy_of_what_lies_beside_the_build_context_is_named() -> None:
    """Terminal-bench-style tasks keep `app/` beside environment/; a Dockerfile that COPYs it
    without a compose file widening the context fails to build (under Harbor too)."""
    dockerfile = ("FROM debian:bookworm\nCOPY app/ /app/\nCOPY --chown=1:1 data.txt /d\n"
                  "COPY --from=builder /out /out\nADD https://x.org/f /f\nCOPY *.py /src/\n"
                  'COPY ["app/run.sh", "/run.sh"]\nCOPY config.yaml \\\n  /etc/c.yaml\n')
    files = task_files(extra={"environment/Dockerfile": dockerfile, "app/run.sh": "echo\n",
                              "environment/data.txt": "x\n", "config.yaml": "a: 1\n"})
    assert task_warnings(files) == [
        f"environment/Dockerfile: COPY {source}: not in the build context (environment/), but "
        f"the task has {beside}: the build fails, as it does under Harbor. Move it into "
        "environment/, or build from the task's directory (a docker-compose.yaml whose main "
        "has context: ${CONTEXT_DIR}/.. and dockerfile: ${CONTEXT_DIR}/Dockerfile)"
        for source, beside in (("app/", "app/"), ("app/run.sh", "app/run.sh"),
                               ("config.yaml", "config.yaml"))]
    files["environment/docker-compose.yaml"] = (
        b"services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n"
        b"      dockerfile: ${CONTEXT_DIR}/Dockerfile\n")
    files["data.txt"] = b"x\n"
    assert task_warnings(files) == []


def test_a_copy_of_what_the_task_lacks_altogether_is_named() -> None:
    """A public task's Dockerfile COPYs a data file its repository did not carry (a large file
    left out): the build fails only after its long pip step; lint says so before any build."""
    dockerfile = ("FROM python:3.12-slim\nRUN pip install numpy\n"
                  "COPY data/series.soft.gz /workspace/data/\nCOPY app.py /app.py\n"
                  "COPY ./ /ctx/\nCOPY ../up.txt /up\n")
    files = task_files(extra={"environment/Dockerfile": dockerfile,
                              "environment/app.py": "print(1)\n"})
    assert task_warnings(files) == [
        "environment/Dockerfile: COPY data/series.soft.gz: not in the build context "
        "(environment/), nor anywhere else in the task: the build fails there, after the steps "
        "before it, as it does under Harbor"]


def test_build_warnings_of_a_task_with_a_docker_image_say_they_need_force_build() -> None:
    """A task that names a prebuilt `docker_image` and ships the Dockerfile it came from (a
    dataset of 197 such tasks COPYs tests/ from beside environment/): Harbor and Shipyard run
    the image, so the Dockerfile's flaws matter only when the Task forces a build."""
    files = task_files('[environment]\ndocker_image = "registry.example/t:1"\n',
                       extra={"environment/Dockerfile": "FROM debian\nCOPY tests/ /tests/\n"
                              "RUN curl -s https://x | sh\n"})
    warnings = task_warnings(files)
    assert len(warnings) == 2, warnings
    assert all(w.startswith("environment/Dockerfile: only when the Task sets forceBuild "
                            "([environment].docker_image is run otherwise, as under Harbor): ")
               for w in warnings), warnings
    assert "COPY tests/: not in the build context" in warnings[0]
    assert "RUN curl -s https://x | sh: a failed download" in warnings[1]


@pytest.mark.parametrize(("dockerfile", "named"), [
    ("RUN curl --proto '=https' -sSf https://sh.rustup.rs | sh -s -- -y\n",
     "RUN curl --proto '=https' -sSf https://sh.rustup.rs | sh"),
    ("RUN apt-get update && \\\n  curl -fsSL https://deb.nodesource.com/setup_20.x | bash - \\\n"
     "  && apt-get install -y nodejs\n",
     "RUN curl -fsSL https://deb.nodesource.com/setup_20.x | bash"),
    ("RUN wget -qO- https://astral.sh/uv/install.sh | sudo -E bash\n",
     "RUN wget -qO- https://astral.sh/uv/install.sh | sudo -E bash"),
    ("RUN set -o pipefail && curl https://x | bash\n", None),
    ('SHELL ["/bin/bash", "-o", "pipefail", "-c"]\nRUN curl https://x | sh\n', None),
    ("RUN curl -fsSLo /tmp/i.sh https://x && sh /tmp/i.sh\n", None),
    ("RUN curl -fsSL https://x/a.tgz | tar xz\n", None),
])
def test_a_download_piped_into_a_shell_without_pipefail_is_named(dockerfile: str,
                                                                 named: str | None) -> None:
    """A three-body task's `curl … rustup.rs | sh` failed for want of network and left the
    build green, `cargo` missing: lint says so before any build (Harbor builds it the same)."""
    from shipyard.taskformat import load_task_files

    files = {"task.toml": 'schema_version = "1.4"\n', "instruction.md": "Do.\n",
             "tests/test.sh": "#!/bin/sh\n", "environment/Dockerfile": "FROM debian\n" + dockerfile}
    task = load_task_files({k: v.encode() for k, v in files.items()}, name="t")
    found = [w for w in lint_task(task) if "pipes nothing into the shell" in w.message]
    if named is None:
        assert found == []
    else:
        assert [w.file for w in found] == ["environment/Dockerfile"]
        assert found[0].message.startswith(f"{named}: a failed download")
