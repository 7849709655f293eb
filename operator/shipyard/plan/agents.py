"""Harbor's installed agents (§d.2): which agents there are, their options (Harbor's agent
kwargs), the environment each runs with, the files it leaves, and how it is installed.
`shipyard.render.agent_scripts` writes each agent's shell (Harbor's command lines).

Differences from Harbor, on purpose:
- the instruction is read from the file the runner writes (stdin or `--*-file`), never put on
  a command line, and no key is either: keys come from Secrets the runner exports for the
  agent phase alone (`spec.agent.envFrom`);
- the agent comes from a bundle under `/shipyard/agents/<name>` (an init container copies it
  into the pod), so the trial pod needs no internet to install it (`install: bundle`);
- the run leaves a small usage file (`USAGE_FILE`) cut from the agent's own output
  (claude-code's stream-json `result` event, codex's last `token_count`, gemini-cli's
  session), which the operator turns into `status.agentResult`
  (`shipyard.reconcile.agent_result`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from shipyard.api.models import AgentSpec
from shipyard.taskformat import MCPServerConfig

AGENTS_ROOT = "/shipyard/agents"
BUNDLE_SOURCE = "/bundle"  # where a bundle image keeps the agent's files
USAGE_FILE = "/logs/agent/shipyard-usage.json"
CLAUDE_SESSION = "/logs/agent/claude-code.session.jsonl"
GEMINI_SESSION = "/logs/agent/gemini-cli.trajectory.jsonl"
CODEX_HOME = "/tmp/codex-home"
DEFAULT_BUNDLE_REPOSITORY = "localhost/shipyard"
BUNDLE_REPOSITORY_ENV = "SHIPYARD_AGENT_BUNDLE_REPOSITORY"  # the operator's setting


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


@dataclass(frozen=True)
class AgentRun:
    """One installed agent's run, decided: what `shipyard.render.agent_scripts` turns into its
    shell, the environment it runs with, the agent's log and the files collected after it."""

    name: str
    version: str
    model: str
    base_url: str | None
    kwargs: dict[str, str]  # checked against the agent's options (web tools already added)
    env: dict[str, str]
    log: str
    collect: tuple[str, ...]
    bundle_image: str | None  # None for install: script
    install_hosts: tuple[str, ...] = ()  # install: script only
    native: str | None = None  # collected file the ATIF trajectory is made from
    mcp_servers: tuple[MCPServerConfig, ...] = ()
    """The task's `[[environment.mcp_servers]]`, written into the agent's own configuration
    as Harbor writes it (claude-code, codex, gemini-cli)."""

    @property
    def options(self) -> Mapping[str, Option]:
        return AGENTS[self.name].options

    @property
    def bundled(self) -> bool:
        return self.bundle_image is not None


@dataclass(frozen=True)
class AgentDef:
    name: str
    default_version: str
    executable: str
    options: Mapping[str, Option]
    env: Callable[[AgentSpec, str, dict[str, str]], dict[str, str]]
    """(spec, model, checked kwargs) -> the agent's environment (Harbor's)."""
    needs_model: bool = True
    model_has_provider: bool = False  # Harbor requires provider/model
    install_hosts: tuple[str, ...] = ()
    extra_collect: tuple[str, ...] = ()
    native: str | None = None  # the native record the ATIF trajectory is made from
    web_tools: tuple[str, str] | None = None
    """(option, value) that turns the agent's native web tools off (Harbor's
    set_web_tools_disabled under a restricted agent phase)."""

    @property
    def log(self) -> str:
        return f"/logs/agent/{self.name}.txt"


def bare_model(model: str) -> str:
    return model.split("/")[-1]


def _option_env(options: Mapping[str, Option], kwargs: dict[str, str]) -> dict[str, str]:
    return {options[k].env: v for k, v in kwargs.items() if options[k].env}  # type: ignore[misc]


# ---------------------------------------------------------------- claude-code

CLAUDE_OPTIONS = {
    "max_turns": Option(flag="--max-turns {value}", kind=int),
    "reasoning_effort": Option(flag="--effort {value}",
                               choices=("low", "medium", "high", "xhigh", "max")),
    "max_budget_usd": Option(flag="--max-budget-usd {value}"),
    "fallback_model": Option(flag="--fallback-model {value}"),
    "append_system_prompt": Option(flag="--append-system-prompt {value}"),
    "allowed_tools": Option(flag="--allowedTools {value}"),
    "disallowed_tools": Option(flag="--disallowedTools {value}"),
    "max_thinking_tokens": Option(env="MAX_THINKING_TOKENS", kind=int),
}


def _claude_env(spec: AgentSpec, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    env = {"FORCE_AUTO_BACKGROUND_TASKS": "1", "ENABLE_BACKGROUND_TASKS": "1"}
    if spec.base_url:
        # Claude's client adds /v1 itself.
        env["ANTHROPIC_BASE_URL"] = spec.base_url.rstrip("/").removesuffix("/v1")
    if model:
        env["ANTHROPIC_MODEL"] = model if spec.base_url else bare_model(model)
    if spec.base_url and model:
        for alias in ("ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
                      "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
            env[alias] = env["ANTHROPIC_MODEL"]
    env.update({
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",
        **_option_env(CLAUDE_OPTIONS, kwargs),
        "CLAUDE_CONFIG_DIR": "/logs/agent/sessions",
    })
    return env


# ---------------------------------------------------------------- codex

CODEX_OPTIONS = {
    "reasoning_effort": Option(flag="-c model_reasoning_effort={value}"),
    "reasoning_summary": Option(flag="-c model_reasoning_summary={value}",
                                choices=("auto", "concise", "detailed", "none")),
}
CODEX_DEFAULTS = {"reasoning_effort": "high"}  # Harbor's


def _codex_env(spec: AgentSpec, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    env = {"CODEX_HOME": CODEX_HOME}
    if spec.base_url:
        env["OPENAI_BASE_URL"] = spec.base_url
    return env


# ---------------------------------------------------------------- the others

def _gemini_env(spec: AgentSpec, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    env = {"GEMINI_CLI_TRUST_WORKSPACE": "true"}
    if spec.base_url:
        env["GOOGLE_GEMINI_BASE_URL"] = spec.base_url
    return env


AIDER_OPTIONS = {
    "reasoning_effort": Option(flag="--reasoning-effort {value}"),
    "thinking_tokens": Option(flag="--thinking-tokens {value}", kind=int),
    "cache_prompts": Option(flag="--cache-prompts", choices=("true",)),
    "auto_lint": Option(flag="--auto-lint", choices=("true",)),
    "auto_test": Option(flag="--auto-test", choices=("true",)),
    "test_cmd": Option(flag="--test-cmd {value}"),
    "map_tokens": Option(flag="--map-tokens {value}", kind=int),
}


def _aider_env(spec: AgentSpec, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    provider = model.split("/", 1)[0]
    if provider not in ("openai", "anthropic"):
        raise AgentConfigError("spec.agent.model", f"aider supports the openai and anthropic "
                                                   f"providers, not {provider!r}")
    if not spec.base_url:
        return {}
    return {"OPENAI_API_BASE" if provider == "openai" else "ANTHROPIC_BASE_URL": spec.base_url}


MINI_OPTIONS = {"cost_limit": Option(flag="--cost-limit {value}")}


def _mini_env(spec: AgentSpec, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    env = {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors"}
    if spec.base_url:
        env["OPENAI_API_BASE"] = spec.base_url
    return env


def _openhands_env(spec: AgentSpec, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    env = {
        "LLM_MODEL": model,
        "AGENT_ENABLE_PROMPT_EXTENSIONS": "false", "AGENT_ENABLE_BROWSING": "false",
        "ENABLE_BROWSER": "false", "SANDBOX_ENABLE_AUTO_LINT": "true",
        "SKIP_DEPENDENCY_CHECK": "1", "RUN_AS_OPENHANDS": "false", "RUNTIME": "local",
        "SU_TO_USER": "false", "SAVE_TRAJECTORY_PATH": "/logs/agent/openhands.trajectory.json",
        "FILE_STORE": "local", "FILE_STORE_PATH": "/logs/agent/", "LLM_LOG_COMPLETIONS": "true",
        "LLM_LOG_COMPLETIONS_FOLDER": "/logs/agent/completions/",
    }
    if spec.base_url:
        env["LLM_BASE_URL"] = spec.base_url
    return env


NPM_HOSTS = ("registry.npmjs.org", "deb.debian.org", "dl-cdn.alpinelinux.org")
PYPI_HOSTS = ("pypi.org", "files.pythonhosted.org")

AGENTS: dict[str, AgentDef] = {
    "claude-code": AgentDef(
        "claude-code", "2.1.330", "claude", CLAUDE_OPTIONS, _claude_env,
        install_hosts=NPM_HOSTS, extra_collect=(USAGE_FILE, CLAUDE_SESSION),
        native=CLAUDE_SESSION, web_tools=("disallowed_tools", "WebSearch,WebFetch"),
    ),
    "codex": AgentDef(
        "codex", "0.169.0", "codex", CODEX_OPTIONS, _codex_env, install_hosts=NPM_HOSTS,
        extra_collect=(USAGE_FILE,), native="/logs/agent/codex.txt",
    ),
    "gemini-cli": AgentDef(
        "gemini-cli", "0.61.0", "gemini", {}, _gemini_env, install_hosts=NPM_HOSTS,
        extra_collect=(USAGE_FILE, GEMINI_SESSION), native=GEMINI_SESSION,
    ),
    "aider": AgentDef(
        "aider", "0.86.1", "aider", AIDER_OPTIONS, _aider_env, model_has_provider=True,
        install_hosts=PYPI_HOSTS,
    ),
    "mini-swe-agent": AgentDef(
        "mini-swe-agent", "1.17.3", "mini-swe-agent", MINI_OPTIONS, _mini_env,
        model_has_provider=True, install_hosts=PYPI_HOSTS,
        extra_collect=("/logs/agent/mini-swe-agent.trajectory.json",),
    ),
    "openhands": AgentDef(
        "openhands", "0.62.0", "openhands-python", {}, _openhands_env, install_hosts=PYPI_HOSTS,
    ),
}
INSTALLED_AGENTS = tuple(AGENTS)


def bundle_image(spec: AgentSpec, version: str, repository: str) -> str:
    """The bundle image of (agent, version): the spec's own, else `<repo>/agent-<name>:<ver>`
    (pin it by digest in `bundleImage`)."""
    return spec.bundle_image or f"{repository}/agent-{spec.name}:{version}"


def agent_run(spec: AgentSpec, bundle_repository: str = DEFAULT_BUNDLE_REPOSITORY,
              web_tools: bool = True) -> AgentRun:
    """The agent phase of an installed agent, or AgentConfigError naming the field.
    `web_tools=False` (a restricted agent phase) turns the agent's native web tools off."""
    agent = AGENTS[spec.name]
    version = spec.version or agent.default_version
    model = spec.model or ""
    if agent.needs_model and not model:
        raise AgentConfigError("spec.agent.model", f"{agent.name} needs a model")
    if agent.model_has_provider and "/" not in model:
        raise AgentConfigError("spec.agent.model",
                               f"{agent.name} needs provider/model, got {model!r}")
    if spec.base_url:
        parts = urlsplit(spec.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AgentConfigError("spec.agent.baseURL",
                                   f"{spec.base_url!r} is not an http(s) URL")
    unknown = sorted(set(spec.kwargs) - set(agent.options))
    if unknown:
        raise AgentConfigError(
            f"spec.agent.kwargs.{unknown[0]}",
            f"Unknown option for agent '{agent.name}' (known: "
            f"{', '.join(sorted(agent.options)) or 'none'})")
    kwargs = {k: agent.options[k].check(k, v) for k, v in spec.kwargs.items()}
    if agent.name == "codex":
        kwargs = {**CODEX_DEFAULTS, **kwargs}
    if not web_tools and agent.web_tools is not None:
        option, tools = agent.web_tools
        kwargs[option] = ",".join(t for t in (kwargs.get(option), tools) if t)
    bundled = spec.install == "bundle"
    return AgentRun(
        name=agent.name,
        version=version,
        model=model,
        base_url=spec.base_url,
        kwargs=kwargs,
        env=agent.env(spec, model, kwargs),
        log=agent.log,
        collect=(agent.log, *agent.extra_collect),
        bundle_image=bundle_image(spec, version, bundle_repository) if bundled else None,
        install_hosts=() if bundled else agent.install_hosts,
        native=agent.native,
    )


MCP_AGENTS = ("claude-code", "codex", "gemini-cli")
"""The installed agents Harbor gives MCP servers to (capabilities.mcp_servers)."""


def with_mcp_servers(run: AgentRun, servers: list[MCPServerConfig]) -> AgentRun:
    """The run with the task's MCP servers, or AgentConfigError where Harbor would refuse them
    (an agent without MCP support) or Shipyard cannot pass them yet (HTTP headers)."""
    if not servers:
        return run
    if run.name not in MCP_AGENTS:
        raise AgentConfigError("spec.agent.name", f"the task declares MCP servers and "
                               f"{run.name} does not support them (use one of "
                               f"{', '.join(MCP_AGENTS)})")
    if any(s.headers for s in servers):
        raise AgentConfigError("spec.agent.name", "MCP servers with HTTP headers are not "
                               "passed to installed agents yet")
    return replace(run, mcp_servers=tuple(servers))


def base_url_host(spec: AgentSpec) -> str | None:
    return urlsplit(spec.base_url).hostname if spec.base_url else None
