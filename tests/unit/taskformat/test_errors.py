"""TaskFormatError: location, text, and conversion of pydantic errors."""

from __future__ import annotations

from shipyard.taskformat import TaskFormatError
from shipyard.taskformat.errors import dotted

from .helpers import config_error


def test_str_names_file_field_and_reason() -> None:
    error = TaskFormatError("bad", file="task.toml", field="environment.allowed_hosts")
    assert str(error) == "task.toml: environment.allowed_hosts: bad"
    assert error.errors == [error]
    assert str(TaskFormatError("bad", file="steps/a/instruction.md")) == (
        "steps/a/instruction.md: bad"
    )
    assert str(TaskFormatError("bad")) == "bad"


def test_combined_errors_keep_every_error() -> None:
    first = TaskFormatError("one", file="a", field="x")
    second = TaskFormatError("two", file="b")
    combined = TaskFormatError.combine([first, second])
    assert combined.errors == [first, second]
    assert (combined.file, combined.field, combined.reason) == ("a", "x", "one")
    assert str(combined) == "a: x: one\nb: two"
    assert TaskFormatError.combine([first]) is first


def test_dotted_locations() -> None:
    assert dotted(("steps", 1, "name")) == "steps[1].name"
    assert dotted(("artifacts", 0, "<table>", "source")) == "artifacts[0].source"
    assert dotted(()) is None


def test_toml_syntax_error() -> None:
    error = config_error("[environment\nos = 1")
    assert (error.file, error.field) == ("task.toml", None)
    assert error.reason.startswith("invalid TOML: ")
    assert "line 1" in error.reason


def test_a_byte_order_mark_is_named() -> None:
    """Harbor refuses such a task.toml too (tomllib on the text as read); the reason says why
    the first line, which looks right in an editor, is refused."""
    error = config_error("\ufeff[task]\nname = 'a/b'\n")
    assert error.reason.startswith("invalid TOML: Invalid statement (at line 1, column 1)")
    assert "byte order mark (BOM)" in error.reason
    assert "BOM" not in config_error("[environment\nos = 1").reason


def test_pydantic_messages_are_short_and_without_urls() -> None:
    error = config_error("[agent]\ntimeout_sec = 'soon'")
    assert str(error) == (
        "task.toml: agent.timeout_sec: Input should be a valid number, unable to parse string as "
        "a number"
    )
    assert "errors.pydantic.dev" not in str(config_error("[environment]\ngpus = 'x'"))


def test_validator_messages_lose_pydantics_prefix() -> None:
    error = config_error('[task]\nname = "x"')
    assert not error.reason.startswith("Value error")


def test_wrong_section_type() -> None:
    error = config_error('environment = "docker"')
    assert error.field == "environment"
