"""The shell an installed agent's phase runs (Harbor's command lines, docs/harbor.md §d.2), from
the run `shipyard.plan.agents` decided: the agent reads its instruction from `instruction` (stdin
or a `--*-file` option, never a command line), its output goes to its log, and what follows it cuts
the usage line and the native session the operator reads (`shipyard.reconcile.agent_result`).
Each agent's own command line, post-run script and install commands are in its module of
`shipyard.agents`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from shipyard.agents.base import AGENTS_ROOT, USAGE_FILE, Invocation
from shipyard.plan.agents import AgentRun, Option


def flags(options: Mapping[str, Option], kwargs: dict[str, str]) -> str:
    parts = [options[k].flag.replace("{value}", shlex.quote(v))  # type: ignore[union-attr]
             for k, v in kwargs.items() if options[k].flag]
    return "".join(p + " " for p in parts)


def claude_mcp_json(run: AgentRun) -> str:
    """Harbor's user-scoped ~/.claude.json MCP servers (no trust dialog, unlike .mcp.json);
    claude calls streamable HTTP "http"."""
    servers: dict[str, dict[str, object]] = {}
    for server in run.mcp_servers:
        if server.transport == "stdio":
            servers[server.name] = {"type": "stdio", "command": server.command,
                                    "args": list(server.args)}
        else:
            kind = "http" if server.transport == "streamable-http" else server.transport
            servers[server.name] = {"type": kind, "url": server.url}
    return json.dumps({"mcpServers": servers}, indent=2)


def codex_mcp_toml(run: AgentRun) -> str:
    """Harbor's `[mcp_servers.<name>]` tables of codex's config.toml."""
    lines = []
    for server in run.mcp_servers:
        lines.append(f"[mcp_servers.{json.dumps(server.name)}]")
        if server.transport == "stdio":
            lines += [f"command = {json.dumps(server.command)}",
                      f"args = {json.dumps(list(server.args))}"]
        else:
            lines.append(f"url = {json.dumps(server.url)}")
    return "\n".join(lines) + "\n"


def gemini_mcp_servers(run: AgentRun) -> dict[str, dict[str, object]]:
    """Harbor's `mcpServers` of gemini's settings.json (streamable HTTP is `httpUrl`)."""
    servers: dict[str, dict[str, object]] = {}
    for server in run.mcp_servers:
        if server.transport == "stdio":
            servers[server.name] = {"command": server.command, "args": list(server.args)}
        elif server.transport == "streamable-http":
            servers[server.name] = {"httpUrl": server.url}
        else:
            servers[server.name] = {"url": server.url}
    return servers


def mcp_setup(run: AgentRun) -> str:
    """The shell that writes the task's MCP servers where the agent reads them, run just
    before the agent (after its own setup: gemini's keeps the auth it chose in `$auth`)."""
    if not run.mcp_servers:
        return ""
    if run.name == "claude-code":
        return (f"printf '%s\\n' {shlex.quote(claude_mcp_json(run))} > "
                '"$CLAUDE_CONFIG_DIR/.claude.json"\n')
    if run.name == "codex":
        return (f"printf '%s' {shlex.quote(codex_mcp_toml(run))} "
                '>> "$CODEX_HOME/config.toml"\n')
    servers = json.dumps(gemini_mcp_servers(run))
    return (
        'mkdir -p "$HOME/.gemini"\n'
        'if [ -n "${auth:-}" ]; then security="\\"security\\": {\\"auth\\": '
        '{\\"selectedType\\": \\"$auth\\"}}, "; else security=""; fi\n'
        f"printf '{{%s\"mcpServers\": %s}}' \"$security\" {shlex.quote(servers)} "
        '> "$HOME/.gemini/settings.json"\n')


def _with_mcp(command: str, run: AgentRun) -> str:
    """The agent's command with `mcp_setup` before its last line (the agent itself)."""
    setup = mcp_setup(run)
    if not setup:
        return command
    head, _, last = command.rpartition("\n")
    return f"{head}\n{setup}{last}" if head else f"{setup}{last}"


def agent_script(run: AgentRun, instruction: str) -> str:
    """The agent phase's command (POSIX sh): the agent, its output to its log, then what
    cuts the usage line and session; the agent's exit code is the phase's."""
    agent = run.agent
    call = Invocation(run.model, run.base_url, flags(run.options, run.kwargs), instruction)
    path = (f'export PATH="{AGENTS_ROOT}/{run.name}/bin:$PATH"\n' if run.bundled
            else 'export PATH="$HOME/.local/bin:/usr/local/bin:$PATH"\n')
    return (
        path
        + f"rm -f {USAGE_FILE}\n"
        + f"{{\n{_with_mcp(agent.command(call), run)}\n}} > {run.log} 2>&1\n"
        + "rc=$?\n"
        + agent.after
        + 'exit "$rc"\n'
    )


def install_script(run: AgentRun) -> str:
    """Harbor's install commands (install: script; run as root before the agent)."""
    return "" if run.bundled else run.agent.install.format(version=run.version)
