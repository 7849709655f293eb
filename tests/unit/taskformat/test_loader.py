"""Loading tasks from directories and file maps (docs/harbor.md §a.1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shipyard.taskformat import (
    LoadedTask,
    TaskFormatError,
    files_digest,
    load_task_dir,
    load_task_files,
    strip_canary,
)

from .helpers import multi_step_files, task_files, write_tree


def load(files: dict[str, bytes], name: str = "hello") -> LoadedTask:
    return load_task_files(files, name)


def load_error(files: dict[str, bytes]) -> TaskFormatError:
    with pytest.raises(TaskFormatError) as info:
        load(files)
    return info.value


class TestCanary:
    @pytest.mark.parametrize(
        ("text", "stripped"),
        [
            ("<!-- harbor-canary GUID 1 -->\n\nDo it.\n", "Do it.\n"),
            ("# CANARY string\n# another canary\n  \nDo it.", "Do it."),
            ("  <!-- Canary -->  \nDo it.", "Do it."),
            ("Do it.\n<!-- canary -->\n", "Do it.\n<!-- canary -->\n"),
            ("# Title\nDo it.", "# Title\nDo it."),
            ("<!-- canary -->", ""),
            ("", ""),
        ],
    )
    def test_strip_canary(self, text: str, stripped: str) -> None:
        assert strip_canary(text) == stripped

    def test_instruction_is_canary_stripped_with_universal_newlines(self) -> None:
        files = task_files(extra={"instruction.md": "# canary GUID x\r\n\r\nLine 1\r\nLine 2\r"})
        assert load(files).instruction == "Line 1\nLine 2\n"


class TestSingleStep:
    def test_loads_with_name_from_caller_or_task_section(self) -> None:
        task = load(task_files())
        assert (task.name, task.short_name, task.is_multi_step) == ("hello", "hello", False)
        assert task.instruction == "Write hello to /app/hello.txt\n"
        named = load(task_files('[task]\nname = "acme/hi"'))
        assert (named.name, named.short_name) == ("acme/hi", "hi")

    def test_files_and_trees(self) -> None:
        task = load(task_files(extra={"tests/data/x.txt": "x"}))
        assert task.files["environment/Dockerfile"] == b"FROM ubuntu:24.04\n"
        assert set(task.tree("tests/")) == {"test.sh", "data/x.txt"}
        assert task.tree("tests") == task.tree("tests/")
        assert task.test_files() == task.tree("tests/")
        assert task.test_script() == "test.sh"
        assert task.solution_files() == {"solve.sh": b"#!/bin/bash\necho hello > /app/hello.txt\n"}
        assert task.solution_script() == "solve.sh"
        assert task.step_names() == []

    def test_missing_config(self) -> None:
        files = task_files()
        del files["task.toml"]
        error = load_error(files)
        assert (error.file, error.reason) == ("task.toml", "task configuration not found")

    def test_config_errors_name_task_toml(self) -> None:
        error = load_error(task_files("[environment]\nallowed_hosts = ['x']"))
        assert str(error) == (
            "task.toml: environment.allowed_hosts: allowed_hosts is only valid when "
            "network_mode='allowlist'."
        )

    def test_missing_instruction(self) -> None:
        files = task_files()
        del files["instruction.md"]
        assert str(load_error(files)) == "instruction.md: instruction file not found"

    def test_missing_test_script(self) -> None:
        files = task_files()
        del files["tests/test.sh"]
        error = load_error(files)
        assert str(error) == "tests/test.sh: No linux test script found: expected tests/test.sh"

    def test_errors_are_collected(self) -> None:
        files = task_files()
        del files["tests/test.sh"], files["instruction.md"]
        assert [e.file for e in load_error(files).errors] == ["instruction.md", "tests/test.sh"]

    def test_invalid_utf8(self) -> None:
        files = task_files()
        files["instruction.md"] = b"\xff\xfe"
        assert str(load_error(files)) == "instruction.md: file is not valid UTF-8 text"
        files = task_files()
        files["task.toml"] = b"\xff"
        assert load_error(files).file == "task.toml"

    def test_no_solution_is_allowed(self) -> None:
        files = task_files()
        del files["solution/solve.sh"]
        task = load(files)
        assert (task.solution_files(), task.solution_script()) == (None, None)


class TestScriptDiscoveryByOs:
    def test_windows_uses_bat_scripts(self) -> None:
        files = task_files(
            '[environment]\nos = "windows"',
            {"tests/test.bat": "echo 1", "solution/solve.bat": "echo hi"},
        )
        task = load(files)
        assert (task.test_script(), task.solution_script()) == ("test.bat", "solve.bat")

    def test_windows_ignores_sh(self) -> None:
        error = load_error(task_files('[environment]\nos = "windows"'))
        assert error.reason == "No windows test script found: expected tests/test.bat"

    def test_linux_ignores_bat(self) -> None:
        files = task_files(extra={"tests/test.bat": "x"})
        del files["tests/test.sh"]
        assert load_error(files).reason == "No linux test script found: expected tests/test.sh"

    def test_separate_verifier_os_decides_the_test_script(self) -> None:
        files = task_files(
            '[verifier]\nenvironment_mode = "separate"\n[verifier.environment]\nos = "windows"',
            {"tests/test.bat": "echo 1"},
        )
        assert load(files).test_script() == "test.bat"


class TestBundledTests:
    def test_verifier_image_needs_no_test_script(self) -> None:
        files = task_files('[verifier.environment]\ndocker_image = "grader:1"')
        del files["tests/test.sh"]
        task = load(files)
        environment = task.verifier_environment()
        assert environment is not None and environment.bundled_tests
        assert task.test_script() == "test.sh"

    @pytest.mark.parametrize("definition", ["Dockerfile", "docker-compose.yaml"])
    def test_tests_dockerfile_needs_no_test_script_when_separate(self, definition: str) -> None:
        files = task_files('[verifier]\nenvironment_mode = "separate"', {f"tests/{definition}": ""})
        del files["tests/test.sh"]
        assert load(files).verifier_environment().bundled_tests  # type: ignore[union-attr]

    def test_tests_dockerfile_is_ignored_when_shared(self) -> None:
        files = task_files(extra={"tests/Dockerfile": "FROM x"})
        del files["tests/test.sh"]
        assert load_error(files).file == "tests/test.sh"


class TestHarborIgnore:
    def test_patterns_apply_to_tests_and_solution_only(self) -> None:
        files = task_files(
            extra={
                ".harborignore": "*.pyc\nbig/\n",
                "tests/x.pyc": "",
                "tests/big/data.bin": "",
                "tests/keep.py": "",
                "solution/cache.pyc": "",
                "environment/app.pyc": "",
                "notes.pyc": "",
            }
        )
        task = load(files)
        assert set(task.files) == {
            "task.toml",
            "instruction.md",
            "environment/Dockerfile",
            "environment/app.pyc",
            "notes.pyc",
            "tests/test.sh",
            "tests/keep.py",
            "solution/solve.sh",
        }

    def test_nested_files_are_relative_to_their_directory_and_deeper_wins(self) -> None:
        files = task_files(
            extra={
                ".harborignore": "*.log\n",
                "tests/.harborignore": "fixtures/\n!keep.log\n",
                "tests/fixtures/a.txt": "",
                "tests/keep.log": "",
                "tests/drop.log": "",
                "solution/fixtures/a.txt": "",
            }
        )
        task = load(files)
        assert set(task.tree("tests/")) == {"test.sh", "keep.log"}
        assert "solution/fixtures/a.txt" in task.files

    def test_step_trees_are_filtered(self) -> None:
        files = multi_step_files('[[steps]]\nname = "a"', ["a"])
        files.update(
            {
                "steps/a/.harborignore": b"*.tmp\n",
                "steps/a/tests/x.tmp": b"",
                "steps/a/solution/solve.sh": b"",
                "steps/a/solution/y.tmp": b"",
                "steps/a/workdir/z.tmp": b"",
            }
        )
        task = load(files)
        assert "steps/a/tests/x.tmp" not in task.files
        assert "steps/a/solution/y.tmp" not in task.files
        assert "steps/a/workdir/z.tmp" in task.files
        assert "steps/a/.harborignore" not in task.files

    def test_excluded_required_scripts(self) -> None:
        error = load_error(task_files(extra={".harborignore": "*.sh\n"}))
        assert [str(e) for e in error.errors] == [
            "tests/test.sh: Required task input is excluded by .harborignore: tests/test.sh",
            "solution/solve.sh: Required task input is excluded by .harborignore: "
            "solution/solve.sh",
        ]

    def test_environment_ignore_files_stay(self) -> None:
        task = load(task_files(extra={"environment/.harborignore": "x"}))
        assert "environment/.harborignore" in task.files


class TestMultiStep:
    TOML = """
        [[steps]]
        name = "scaffold"
        [[steps]]
        name = "grade"
    """

    def test_loads(self) -> None:
        files = multi_step_files(self.TOML, ["scaffold", "grade"])
        files["steps/scaffold/instruction.md"] = b"<!-- canary -->\nBuild it.\n"
        files["steps/scaffold/workdir/setup.sh"] = b"echo setup"
        task = load(files)
        assert task.is_multi_step and task.instruction == ""
        assert task.step_names() == ["scaffold", "grade"]
        assert task.step_instruction("scaffold") == "Build it.\n"
        assert task.workdir_files("scaffold") == {"setup.sh": b"echo setup"}
        assert task.workdir_files("grade") == {}
        with pytest.raises(ValueError, match="Unknown step"):
            task.step_instruction("deploy")

    def test_step_tests_overlay_shared_tests(self) -> None:
        files = multi_step_files(self.TOML, ["scaffold", "grade"])
        del files["steps/grade/tests/test.sh"]
        files.update(
            {
                "tests/test.sh": b"shared",
                "tests/helpers.py": b"shared helpers",
                "tests/conftest.py": b"shared conftest",
                "steps/scaffold/tests/conftest.py": b"step conftest",
            }
        )
        task = load(files)
        assert task.test_files("scaffold") == {
            "test.sh": b"#!/bin/bash\n",
            "helpers.py": b"shared helpers",
            "conftest.py": b"step conftest",
        }
        assert task.test_files("grade")["test.sh"] == b"shared"
        assert task.test_files() == task.tree("tests/")

    def test_step_solution_falls_back_to_task_solution(self) -> None:
        files = multi_step_files(self.TOML, ["scaffold", "grade"])
        files["solution/solve.sh"] = b"task"
        files["steps/scaffold/solution/solve.sh"] = b"step"
        task = load(files)
        assert task.solution_files("scaffold") == {"solve.sh": b"step"}
        assert task.solution_files("grade") == {"solve.sh": b"task"}
        assert task.solution_script("grade") == "solve.sh"

    def test_step_solution_dir_without_script_does_not_fall_back(self) -> None:
        files = multi_step_files(self.TOML, ["scaffold", "grade"])
        files["solution/solve.sh"] = b"task"
        files["steps/scaffold/solution/notes.md"] = b""
        task = load(files)
        assert (task.solution_files("scaffold"), task.solution_script("scaffold")) == (None, None)

    def test_missing_step_directory_and_instruction(self) -> None:
        files = multi_step_files(self.TOML, ["scaffold"])
        del files["steps/scaffold/instruction.md"]
        errors = load_error(files).errors
        assert [str(e) for e in errors] == [
            "steps/scaffold/instruction.md: steps[0].name: step instruction not found",
            "steps/grade/: steps[1].name: step directory not found: steps/grade/",
        ]

    def test_missing_step_test(self) -> None:
        files = multi_step_files(self.TOML, ["scaffold", "grade"])
        del files["steps/grade/tests/test.sh"]
        assert load_error(files).reason == (
            "No linux test script found for step 'grade': expected steps/grade/tests/test.sh or "
            "tests/test.sh"
        )

    def test_root_instruction_not_needed(self) -> None:
        assert (
            "instruction.md" not in load(multi_step_files(self.TOML, ["scaffold", "grade"])).files
        )

    def test_step_verifier_image_bundles_tests(self) -> None:
        toml = self.TOML + '[steps.verifier.environment]\ndocker_image = "grader"\n'
        files = multi_step_files(toml, ["scaffold", "grade"])
        del files["steps/grade/tests/test.sh"]
        assert load(files).verifier_environment("grade").bundled_tests  # type: ignore[union-attr]


class TestFileMapPaths:
    @pytest.mark.parametrize(
        "path", ["/etc/passwd", "../x", "tests/../../x", "a//b", "./a", "a/./b", "C:/x", "a\\b", ""]
    )
    def test_rejected(self, path: str) -> None:
        files = task_files()
        files[path] = b""
        error = load_error(files)
        assert "relative POSIX paths" in error.reason

    def test_content_must_be_bytes(self) -> None:
        files: dict = task_files()
        files["x"] = "text"
        assert load_error(files).reason == "Task file content must be bytes"

    def test_bytes_like_content(self) -> None:
        files: dict = task_files()
        files["x"] = bytearray(b"1")
        assert load(files).files["x"] == b"1"


class TestDirectory:
    def test_loads_like_a_file_map(self, tmp_path: Path) -> None:
        root = write_tree(tmp_path / "my-task", task_files())
        task = load_task_dir(root)
        assert task.name == "my-task"
        assert task == load_task_files(task_files(), "my-task")

    def test_not_a_directory(self, tmp_path: Path) -> None:
        with pytest.raises(TaskFormatError, match="not a task directory"):
            load_task_dir(tmp_path / "missing")

    def test_symlinks_inside_are_followed(self, tmp_path: Path) -> None:
        root = write_tree(tmp_path / "t", task_files(extra={"shared/lib.py": "lib"}))
        os.symlink("../shared/lib.py", root / "tests" / "lib.py")
        os.symlink("../shared", root / "solution" / "shared")
        task = load_task_dir(root)
        assert task.files["tests/lib.py"] == b"lib"
        assert task.files["solution/shared/lib.py"] == b"lib"

    def test_symlink_escaping_the_task(self, tmp_path: Path) -> None:
        (tmp_path / "secret").write_text("s")
        root = write_tree(tmp_path / "t", task_files())
        os.symlink("../../secret", root / "tests" / "secret")
        with pytest.raises(TaskFormatError) as info:
            load_task_dir(root)
        assert info.value.file == "tests/secret"
        assert "resolves outside the task directory" in info.value.reason

    def test_symlink_cycle(self, tmp_path: Path) -> None:
        root = write_tree(tmp_path / "t", task_files())
        os.symlink("..", root / "tests" / "up")
        with pytest.raises(TaskFormatError) as info:
            load_task_dir(root)
        assert (info.value.file, info.value.reason) == (
            "tests/up",
            "Task input path is a symlink cycle",
        )

    def test_symlink_loop(self, tmp_path: Path) -> None:
        root = write_tree(tmp_path / "t", task_files())
        os.symlink("b", root / "a")
        os.symlink("a", root / "b")
        with pytest.raises(TaskFormatError, match="symlink cycle"):
            load_task_dir(root)

    def test_dangling_symlink(self, tmp_path: Path) -> None:
        root = write_tree(tmp_path / "t", task_files())
        os.symlink("nowhere", root / "tests" / "gone")
        with pytest.raises(TaskFormatError, match="cannot be resolved"):
            load_task_dir(root)


class TestDigest:
    def test_stable_and_sensitive(self) -> None:
        files = task_files()
        digest = load(files).digest
        assert digest.startswith("sha256:") and len(digest) == 71
        assert load(dict(reversed(files.items()))).digest == digest
        assert digest == files_digest(load(files).files)
        changed = dict(files, **{"tests/extra": b""})
        assert load(changed).digest != digest

    def test_path_and_content_boundaries_are_unambiguous(self) -> None:
        assert files_digest({"ab": b"c"}) != files_digest({"a": b"bc"})
        assert files_digest({"a": b"", "b": b""}) != files_digest({"a": b"b"})

    def test_ignored_files_do_not_count(self) -> None:
        plain = load(task_files(extra={".harborignore": "*.tmp"}))
        noisy = load(task_files(extra={".harborignore": "*.tmp", "tests/x.tmp": "x"}))
        assert plain.digest == noisy.digest

    def test_reloading_files_is_a_fixed_point(self) -> None:
        task = load(task_files(extra={".harborignore": "*.tmp", "tests/x.tmp": "x"}))
        assert load(task.files).digest == task.digest
