"""What every installed agent's module declares (`AgentDef`), and what they share: options,
the paths in the pod, the usage record, JSON-lines reading.

Pure and standard-library only: the layers above read it, and so does the bundle builder of
the local cluster (`hack/localcluster/agent_bundles.py`), outside the package's virtualenv.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

AGENTS_ROOT = "/shipyard/agents"
"""Where a bundled agent lives in the trial pod (`<root>/<name>/bin` goes first on PATH)."""
BUNDLE_SOURCE = "/bundle"  # where a bundle image keeps the agent's files
USAGE_FILE = "/logs/agent/shipyard-usage.json"
"""The small record the run cuts from the agent's own output, which `usage` parses."""


class AgentConfigError(ValueError):
    """The agent spec cannot run: `field` names the spec field at fault."""

    def __init__(self, field_: str, message: str) -> None:
        super().__init__(f"{field_}: {message}")
        self.field = field_
        self.message = message


@dataclass(frozen=True)
class Option:
    """One Harbor agent kwarg: a CLI flag (`{value}` is replaced, shell-quoted, by the
    renderer), or an environment variable."""

    flag: str | None = None
    env: str | None = None
    choices: tuple[str, ...] = ()
    kind: type = str

    def check(self, name: str, value: str) -> str:
        if self.choices and value not in self.choices:
            raise AgentConfigError(f"spec.agent.kwargs.{name}",
                                   f"{value!r} is not one of {', '.join(self.choices)}")
        if self.kind is int:
            try:
                int(value)
            except ValueError:
                raise AgentConfigError(f"spec.agent.kwargs.{name}",
                                       f"{value!r} is not an integer") from None
        return value


def option_env(options: Mapping[str, Option], kwargs: dict[str, str]) -> dict[str, str]:
    """The kwargs that are environment variables, as the environment."""
    return {options[k].env: v for k, v in kwargs.items() if options[k].env}  # type: ignore[misc]


def bare_model(model: str) -> str:
    return model.split("/")[-1]


@dataclass(frozen=True)
class Invocation:
    """What an agent's command line is written from: the model, the endpoint, the rendered
    option flags (each followed by a space) and the file holding the instruction."""

    model: str
    base_url: str | None
    flags: str
    instruction: str


@dataclass(frozen=True)
class Usage:
    """An agent's own report of its run (turned into `status.agentResult`)."""

    input_tokens: int | None = None  # with cached input, as Harbor's n_input_tokens
    cache_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    model: str | None = None
    turns: int | None = None


class UsageLike(Protocol):
    input_tokens: int | None
    cache_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None


@dataclass(frozen=True)
class NpmBundle:
    """How the local cluster's bundle image of an agent is made from npm packages (all
    `{version}` placeholders are the agent's pinned version): `package`'s tarball files → paths
    under `/bundle/<agent>/`, more packages likewise, and scripts written as they are."""

    package: str
    files: Mapping[str, str]
    more: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    scripts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentDef:
    """One installed agent, everything Shipyard knows of it, declared in its own module."""

    name: str
    default_version: str
    """The pinned version (the bundle's, and `install: script`'s default)."""
    executable: str
    options: Mapping[str, Option]
    env: Callable[[str | None, str, dict[str, str]], dict[str, str]]
    """(base URL, model, checked kwargs) -> the agent's environment (Harbor's)."""
    command: Callable[[Invocation], str]
    """The agent's command line (its output goes to its log)."""
    install: str
    """Harbor's install commands (`install: script`, run as root), `{version}` replaced."""
    after: str = ""
    """Run after the agent whatever its exit code: cuts `USAGE_FILE` and the native record."""
    default_kwargs: Mapping[str, str] = field(default_factory=dict)  # Harbor's defaults
    needs_model: bool = True
    model_has_provider: bool = False  # Harbor requires provider/model
    install_hosts: tuple[str, ...] = ()
    extra_collect: tuple[str, ...] = ()
    native: str | None = None  # the collected native record the ATIF trajectory is made from
    web_tools: tuple[str, str] | None = None
    """(option, value) that turns the agent's native web tools off (Harbor's
    set_web_tools_disabled under a restricted agent phase)."""
    usage: Callable[[str, str | None], Usage | None] | None = None
    """(USAGE_FILE's text, the spec's model) -> the agent's report, if it makes one."""
    trajectory: Callable[[str, str, str | None, UsageLike | None], dict[str, Any] | None] | None \
        = None
    """(native record, version, model, usage) -> the ATIF trajectory."""
    error: Callable[[str], str | None] | None = None
    """USAGE_FILE's text -> the failure the agent reported there (classified like its log)."""
    bundle: NpmBundle | None = None
    """How the local cluster builds its bundle image (None: `install: script` only)."""

    @property
    def log(self) -> str:
        return f"/logs/agent/{self.name}.txt"


NPM_HOSTS = ("registry.npmjs.org", "deb.debian.org", "dl-cdn.alpinelinux.org")
PYPI_HOSTS = ("pypi.org", "files.pythonhosted.org")
NPM_INSTALL = (
    "if command -v apk >/dev/null 2>&1; then apk add --no-cache curl bash nodejs npm; "
    "elif command -v apt-get >/dev/null 2>&1; then apt-get update && "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y curl nodejs npm; fi\n"
)


def to_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines text, other lines (CLI chatter) skipped."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # the agent's output: nested or not JSON
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


def last_event(text: str) -> dict[str, Any] | None:
    events = json_lines(text)
    return events[-1] if events else None
