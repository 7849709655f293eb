"""Verifier mode and environment, timeouts and the per-step inheritance table (docs/harbor.md
§a.5)."""

from __future__ import annotations

import pytest

from shipyard.taskformat import (
    ArtifactConfig,
    effective_timeout,
    resolve_verifier_environment,
    resolve_verifier_mode,
    step_settings,
)

from .helpers import config


class TestVerifierMode:
    @pytest.mark.parametrize(
        ("toml", "mode"),
        [
            ("", "shared"),
            ("[verifier.environment]\ncpus = 2", "separate"),
            ('[verifier]\nenvironment_mode = "shared"', "shared"),
            ('[verifier]\nenvironment_mode = "separate"', "separate"),
            (
                '[verifier]\nenvironment_mode = "separate"\n[verifier.environment]\ncpus = 2',
                "separate",
            ),
        ],
    )
    def test_task_level_table(self, toml: str, mode: str) -> None:
        assert resolve_verifier_mode(config(toml)) == mode

    def test_verified_example_step_overrides(self) -> None:
        c = config(
            """
            [verifier]
            environment_mode = "separate"
            [[steps]]
            name = "a"
            [[steps]]
            name = "b"
            [steps.verifier]
            environment_mode = "shared"
            """
        )
        assert resolve_verifier_mode(c, "a") == "separate"
        assert resolve_verifier_mode(c, "b") == "shared"

    def test_step_environment_implies_separate(self) -> None:
        c = config(
            """
            [[steps]]
            name = "build"
            [[steps]]
            name = "grade"
            [steps.verifier.environment]
            docker_image = "grader"
            """
        )
        assert [resolve_verifier_mode(c, s) for s in ("build", "grade")] == ["shared", "separate"]
        assert resolve_verifier_mode(c) == "shared"

    def test_unknown_step(self) -> None:
        with pytest.raises(ValueError, match="Unknown step"):
            resolve_verifier_mode(config(), "x")


class TestVerifierEnvironment:
    def test_shared_has_none(self) -> None:
        assert resolve_verifier_environment(config(), {"tests/Dockerfile"}) is None

    def test_separate_without_definition_copies_environment(self) -> None:
        c = config(
            """
            [verifier]
            environment_mode = "separate"
            [environment]
            docker_image = "agent:1"
            os = "linux"
            cpus = 4
            network_mode = "no-network"
            """
        )
        environment = resolve_verifier_environment(c, set())
        assert environment is not None
        assert (environment.context_dir, environment.bundled_tests) == ("environment/", False)
        assert environment.inherits_environment
        assert (environment.config.docker_image, environment.config.cpus) == ("agent:1", 4)
        assert environment.config.network_mode == "no-network"
        assert environment.config is not c.environment
        assert c.environment.docker_image == "agent:1"

    def test_tests_dockerfile_is_the_build_context(self) -> None:
        c = config('[verifier]\nenvironment_mode = "separate"\n[environment]\ndocker_image = "a"')
        environment = resolve_verifier_environment(c, {"tests/Dockerfile"})
        assert environment is not None
        assert (environment.context_dir, environment.bundled_tests) == ("tests/", True)
        assert environment.config.docker_image is None

    def test_verifier_image_wins(self) -> None:
        c = config('[verifier.environment]\ndocker_image = "grader"\nmemory_mb = 512')
        environment = resolve_verifier_environment(c, {"tests/Dockerfile"})
        assert environment is not None
        assert (environment.config.docker_image, environment.config.memory_mb) == ("grader", 512)
        assert environment.bundled_tests and not environment.inherits_environment

    def test_verifier_environment_without_image_or_dockerfile_builds_environment_dir(self) -> None:
        c = config(
            """
            [environment]
            docker_image = "agent"
            os = "windows"
            [verifier.environment]
            cpus = 1
            """
        )
        environment = resolve_verifier_environment(c, set())
        assert environment is not None
        assert (environment.context_dir, environment.config.docker_image) == (
            "environment/",
            "agent",
        )
        assert environment.config.os == "windows"  # os comes from [environment] unless set
        assert environment.config.cpus == 1

    def test_verifier_environment_os_override(self) -> None:
        c = config('[environment]\nos = "windows"\n[verifier.environment]\nos = "linux"')
        environment = resolve_verifier_environment(c, set())
        assert environment is not None and environment.config.os == "linux"

    def test_step_candidates_come_first(self) -> None:
        c = config(
            """
            [verifier.environment]
            docker_image = "task-grader"
            [[steps]]
            name = "a"
            [[steps]]
            name = "b"
            [steps.verifier.environment]
            docker_image = "step-grader"
            [[steps]]
            name = "c"
            [steps.verifier.environment]
            cpus = 8
            """
        )
        files = {"steps/a/tests/Dockerfile"}
        a = resolve_verifier_environment(c, files, "a")
        b = resolve_verifier_environment(c, files, "b")
        c_env = resolve_verifier_environment(c, files, "c")
        assert a is not None and b is not None and c_env is not None
        assert (a.context_dir, a.config.docker_image) == ("steps/a/tests/", None)
        assert (b.context_dir, b.config.docker_image) == ("steps/b/tests/", "step-grader")
        # Step c's definition (cpus) with the task verifier's image.
        assert (c_env.context_dir, c_env.config.docker_image, c_env.config.cpus) == (
            "tests/",
            "task-grader",
            8,
        )


class TestEffectiveTimeout:
    @pytest.mark.parametrize(
        ("kwargs", "expected"),
        [
            ({"base": 600.0}, 600.0),
            ({"base": None}, None),
            ({"base": 600.0, "multiplier": 2.0}, 1200.0),
            ({"base": 600.0, "override": 100.0}, 100.0),
            ({"base": 600.0, "override": 0.0}, 600.0),
            ({"base": None, "override": 50.0}, 50.0),
            ({"base": 600.0, "max_timeout": 300.0}, 300.0),
            ({"base": 600.0, "max_timeout": 0.0}, 600.0),
            ({"base": 600.0, "max_timeout": 300.0, "multiplier": 0.5}, 150.0),
            ({"base": 100.0, "override": 900.0, "max_timeout": 300.0, "multiplier": 2}, 600.0),
            ({"base": None, "max_timeout": 300.0}, None),
            # held as a year: 1e308 seconds, or times 1e308, overflowed every int downstream
            ({"base": 1e308}, 365 * 86400.0),
            ({"base": 600.0, "multiplier": 1e308}, 365 * 86400.0),
        ],
    )
    def test_formula(self, kwargs: dict, expected: float | None) -> None:
        base = kwargs.pop("base")
        assert effective_timeout(base, **kwargs) == expected


class TestStepSettings:
    TOML = """
        artifacts = ["/app/greet.sh"]
        [agent]
        timeout_sec = 120
        user = "agent"
        [verifier]
        timeout_sec = 1200
        user = "grader"
        env = { A = "task", B = "task" }
        [[verifier.collect]]
        command = "task-hook"
        [environment.healthcheck]
        command = "test -f /ready"
        [[steps]]
        name = "scaffold"
        min_reward = 1.0
        [steps.agent]
        timeout_sec = 60
        [steps.verifier]
        env = { B = "step" }
        [[steps.verifier.collect]]
        command = "step-hook"
        [steps.healthcheck]
        command = "test -f /step"
        [[steps]]
        name = "document"
        artifacts = ["/app/README.md"]
        [steps.agent]
        user = 1000
        [steps.verifier]
        timeout_sec = 30
        user = "root"
    """

    def test_task_level(self) -> None:
        s = step_settings(config(self.TOML), None)
        assert (s.step, s.agent_timeout_sec, s.agent_user) == (None, 120.0, "agent")
        assert (s.verifier_timeout_sec, s.verifier_user) == (1200.0, "grader")
        assert s.verifier_env == {"A": "task", "B": "task"}
        assert [h.command for h in s.collect] == ["task-hook"]
        assert s.healthcheck is not None and s.healthcheck.command == "test -f /ready"
        assert [a.source for a in s.artifacts] == ["/logs/artifacts", "/app/greet.sh"]
        assert (s.min_reward, s.verifier_mode) == (None, "shared")

    def test_step_inheritance(self) -> None:
        c = config(self.TOML)
        scaffold = step_settings(c, "scaffold")
        assert (scaffold.agent_timeout_sec, scaffold.agent_user) == (60.0, "agent")
        assert scaffold.verifier_user == "grader"
        assert scaffold.verifier_env == {"A": "task", "B": "step"}
        assert [h.command for h in scaffold.collect] == ["task-hook", "step-hook"]
        assert scaffold.healthcheck is not None and scaffold.healthcheck.command == "test -f /step"
        assert scaffold.min_reward == 1.0
        document = step_settings(c, "document")
        assert (document.agent_timeout_sec, document.agent_user) == (120.0, 1000)
        assert (document.verifier_timeout_sec, document.verifier_user) == (30.0, "root")
        assert document.healthcheck is None

    def test_step_verifier_timeout_does_not_inherit_task_timeout(self) -> None:
        """Harbor's quirk, kept on purpose: [verifier].timeout_sec = 1200 -> step 600."""
        assert step_settings(config(self.TOML), "scaffold").verifier_timeout_sec == 600.0

    def test_artifacts_task_then_trial_then_step(self) -> None:
        s = step_settings(
            config(self.TOML), "document", trial_artifacts=["/trial", ArtifactConfig(source="/t2")]
        )
        assert [a.source for a in s.artifacts] == [
            "/logs/artifacts",
            "/app/greet.sh",
            "/trial",
            "/t2",
            "/app/README.md",
        ]

    def test_explicit_convention_entry_replaces_the_implicit_one(self) -> None:
        c = config('artifacts = [{ source = "/logs/artifacts/", exclude = ["*.bin"] }]')
        (only,) = step_settings(c, None).artifacts
        assert only.exclude == ["*.bin"]

    def test_windows_convention_entry(self) -> None:
        c = config('[environment]\nos = "windows"')
        assert [a.source for a in step_settings(c, None).artifacts] == ["C:/logs/artifacts"]
