"""The shell an installed agent's phase runs (Harbor's command lines, §d.2), from the run
`shipyard.plan.agents` decided: the agent reads its instruction from `instruction` (stdin or a
`--*-file` option, never a command line), its output goes to its log, and what follows it cuts
the usage line and the native session the operator reads (`shipyard.reconcile.agent_result`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping

from shipyard.plan.agents import (
    AGENTS_ROOT,
    CLAUDE_SESSION,
    GEMINI_SESSION,
    USAGE_FILE,
    AgentRun,
    Option,
    bare_model,
)

CODEX_SECRETS = "/tmp/codex-secrets"


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


def _claude(run: AgentRun, instruction: str) -> str:
    mcp = (f'printf \'%s\\n\' {shlex.quote(claude_mcp_json(run))} > '
           '"$CLAUDE_CONFIG_DIR/.claude.json"\n' if run.mcp_servers else "")
    return (
        'mkdir -p "$CLAUDE_CONFIG_DIR/debug" "$CLAUDE_CONFIG_DIR/projects" '
        '"$CLAUDE_CONFIG_DIR/shell-snapshots" "$CLAUDE_CONFIG_DIR/statsig" '
        '"$CLAUDE_CONFIG_DIR/todos" "$CLAUDE_CONFIG_DIR/skills"\n'
        + mcp +
        "claude --verbose --output-format=stream-json --permission-mode=bypassPermissions "
        f"{flags(run.options, run.kwargs)}--print < {instruction}"
    )


# The stream's last `result` event carries usage, num_turns and total_cost_usd; the session's
# user and assistant events become the ATIF trajectory (the rest of it, e.g. the system
# prompt's request blobs, is left out: it would crowd out the conversation).
CLAUDE_AFTER = (
    f"grep '\"type\":\"result\"' /logs/agent/claude-code.txt | tail -n 1 > {USAGE_FILE}\n"
    "find \"$CLAUDE_CONFIG_DIR/projects\" -name '*.jsonl' -exec grep -h "
    "-e '\"type\":\"user\"' -e '\"type\":\"assistant\"' {} + "
    f"> {CLAUDE_SESSION} 2>/dev/null\n"
)


def _codex(run: AgentRun, instruction: str) -> str:
    setup = (
        f'mkdir -p "$CODEX_HOME" {CODEX_SECRETS} /logs/agent\n'
        # auth.json from the key exported by the runner (printf is a shell builtin: the key
        # is on no process's command line).
        f'(umask 077; printf \'{{\\n  "OPENAI_API_KEY": "%s"\\n}}\\n\' "${{OPENAI_API_KEY:-}}" '
        f"> {CODEX_SECRETS}/auth.json)\n"
        f'ln -sf {CODEX_SECRETS}/auth.json "$CODEX_HOME/auth.json"\n'
    )
    if run.base_url:  # codex honours openai_base_url only from config.toml
        setup += ('printf \'openai_base_url = "%s"\\n\' "$OPENAI_BASE_URL" '
                  '>> "$CODEX_HOME/config.toml"\n')
    if run.mcp_servers:
        setup += (f"printf '%s' {shlex.quote(codex_mcp_toml(run))} "
                  '>> "$CODEX_HOME/config.toml"\n')
    return setup + (
        "codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check "
        f"--model {shlex.quote(bare_model(run.model))} --json --enable unified_exec "
        f"{flags(run.options, run.kwargs)}- < {instruction}"
    )


CODEX_AFTER = (
    'if [ -d "$CODEX_HOME/sessions" ]; then rm -rf /logs/agent/sessions; '
    'cp -R "$CODEX_HOME/sessions" /logs/agent/sessions; fi\n'
    # The last token_count holds the session's running totals (summing every event would
    # count the same usage many times over: harbor #3289).
    "find /logs/agent/sessions -name '*.jsonl' -exec grep -h '\"token_count\"' {} + "
    f"2>/dev/null | grep '\"total_token_usage\"' | tail -n 1 > {USAGE_FILE}\n"
    f'rm -rf {CODEX_SECRETS} "$CODEX_HOME"\n'
)


def _gemini(run: AgentRun, instruction: str) -> str:
    # Headless gemini cannot ask for an auth method: pre-select the one the exported keys
    # imply, as Harbor does in ~/.gemini/settings.json.
    setup = (
        'auth=""\n'
        'if [ -n "${GOOGLE_GENAI_USE_VERTEXAI:-}" ]; then auth=vertex-ai; '
        'elif [ -n "${GEMINI_API_KEY:-}${GOOGLE_API_KEY:-}" ]; then auth=gemini-api-key; fi\n'
        'if [ -n "$auth" ]; then mkdir -p "$HOME/.gemini" && printf '
        '\'{"security": {"auth": {"selectedType": "%s"}}}\' "$auth" '
        '> "$HOME/.gemini/settings.json"; fi\n'
    )
    if run.mcp_servers:  # the same file, with the servers (and the auth when there is one)
        servers = json.dumps(gemini_mcp_servers(run)).replace("%", "%%")
        setup += (
            'mkdir -p "$HOME/.gemini"\n'
            'if [ -n "$auth" ]; then security="\\"security\\": {\\"auth\\": '
            '{\\"selectedType\\": \\"$auth\\"}}, "; else security=""; fi\n'
            f"printf '{{%s\"mcpServers\": %s}}' \"$security\" "
            f"{shlex.quote(servers)} > \"$HOME/.gemini/settings.json\"\n")
    # gemini appends --prompt to what it reads on stdin.
    return setup + (f"gemini --yolo {flags(run.options, run.kwargs)}"
                    f"--model={shlex.quote(bare_model(run.model))} --prompt='' < {instruction}")


# Harbor's copy of the newest session; it also carries the token counts.
GEMINI_AFTER = (
    'src=$(ls -t $(find "$HOME/.gemini/tmp" -type f -name \'session-*.json*\' 2>/dev/null) '
    "2>/dev/null | head -n 1)\n"
    f'if [ -n "$src" ]; then cp "$src" {GEMINI_SESSION} && cp "$src" {USAGE_FILE}; fi\n'
)


def _aider(run: AgentRun, instruction: str) -> str:
    provider, name = run.model.split("/", 1)
    key = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    return (
        f'AIDER_API_KEY="{provider}=${{{key}:-}}"; export AIDER_API_KEY\n'
        f"aider --yes {flags(run.options, run.kwargs)}--model={shlex.quote(name)} "
        f"--message-file={instruction}"
    )


def _mini(run: AgentRun, instruction: str) -> str:
    # The task is read by the shell inside the pod, never on an exec command line.
    return (
        f"mini-swe-agent --yolo --model={shlex.quote(run.model)} "
        f"--task=\"$(cat {instruction})\" "
        "--output=/logs/agent/mini-swe-agent.trajectory.json "
        f"{flags(run.options, run.kwargs)}--exit-immediately"
    )


def _openhands(run: AgentRun, instruction: str) -> str:
    return ('SANDBOX_VOLUMES="${PWD}:/workspace:rw" USER="$(id -un)" '
            f"openhands-python -m openhands.core.main --file={instruction}")


NPM_INSTALL = (
    "if command -v apk >/dev/null 2>&1; then apk add --no-cache curl bash nodejs npm; "
    "elif command -v apt-get >/dev/null 2>&1; then apt-get update && "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y curl nodejs npm; fi\n"
)
# (command, what runs after it whatever its exit code, Harbor's install commands)
SCRIPTS: dict[str, tuple[Callable[[AgentRun, str], str], str, str]] = {
    "claude-code": (_claude, CLAUDE_AFTER,
                    NPM_INSTALL + "npm install -g @anthropic-ai/claude-code@{version}\n"),
    "codex": (_codex, CODEX_AFTER, NPM_INSTALL + "npm install -g @openai/codex@{version}\n"),
    "gemini-cli": (_gemini, GEMINI_AFTER,
                   NPM_INSTALL + "npm install -g @google/gemini-cli@{version}\n"),
    "aider": (_aider, "", "python3 -m pip install aider-chat=={version}\n"),
    "mini-swe-agent": (_mini, "", "python3 -m pip install mini-swe-agent=={version}\n"),
    "openhands": (_openhands, "", (
        "python3 -m venv /opt/openhands-venv && /opt/openhands-venv/bin/pip install "
        "openhands-ai=={version} && ln -sf /opt/openhands-venv/bin/python "
        "/usr/local/bin/openhands-python\n")),
}


def agent_script(run: AgentRun, instruction: str) -> str:
    """The agent phase's command (POSIX sh): the agent, its output to its log, then what
    cuts the usage line and session; the agent's exit code is the phase's."""
    command, after, _ = SCRIPTS[run.name]
    path = (f'export PATH="{AGENTS_ROOT}/{run.name}/bin:$PATH"\n' if run.bundled
            else 'export PATH="$HOME/.local/bin:/usr/local/bin:$PATH"\n')
    return (
        path
        + f"rm -f {USAGE_FILE}\n"
        + f"{{\n{command(run, instruction)}\n}} > {run.log} 2>&1\n"
        + "rc=$?\n"
        + after
        + 'exit "$rc"\n'
    )


def install_script(run: AgentRun) -> str:
    """Harbor's install commands (install: script; run as root before the agent)."""
    return "" if run.bundled else SCRIPTS[run.name][2].format(version=run.version)
