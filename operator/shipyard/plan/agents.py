"""Harbor's installed agents (docs/harbor.md §d.2): which agents there are, their options (Harbor's
agent kwargs), the environment each runs with, the files it leaves, and how it is installed.
Each agent is a module of `shipyard.agents` (its `AgentDef`); this module decides one run of
it. `shipyard.render.agent_scripts` writes the run's shell (Harbor's command lines).

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

from collections.abc import Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from shipyard.agents import INSTALLED_AGENTS, REGISTRY
from shipyard.agents.base import (
    AGENTS_ROOT,
    BUNDLE_SOURCE,
    USAGE_FILE,
    AgentConfigError,
    AgentDef,
    Option,
    bare_model,
)
from shipyard.api.models import AgentSpec
from shipyard.taskformat import MCPServerConfig

__all__ = [
    "AGENTS", "AGENTS_ROOT", "BUNDLE_SOURCE", "INSTALLED_AGENTS", "USAGE_FILE",
    "AgentConfigError", "AgentDef", "AgentRun", "Option", "agent_run", "bare_model",
    "base_url_host", "bundle_image", "with_mcp_servers",
]

AGENTS: Mapping[str, AgentDef] = REGISTRY
DEFAULT_BUNDLE_REPOSITORY = "localhost/shipyard"
BUNDLE_REPOSITORY_ENV = "SHIPYARD_AGENT_BUNDLE_REPOSITORY"  # the operator's setting


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
    def agent(self) -> AgentDef:
        return REGISTRY[self.name]

    @property
    def options(self) -> Mapping[str, Option]:
        return self.agent.options

    @property
    def bundled(self) -> bool:
        return self.bundle_image is not None


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
    kwargs = {**agent.default_kwargs,
              **{k: agent.options[k].check(k, v) for k, v in spec.kwargs.items()}}
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
        env=agent.env(spec.base_url, model, kwargs),
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
