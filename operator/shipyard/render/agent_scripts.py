"""The shell an installed agent's phase runs (Harbor's command lines, docs/harbor.md §d.2), from
the run `shipyard.plan.agents` decided: the agent reads its instruction from `instruction` (stdin
or a `--*-file` option, never a command line), its output goes to its log, and what follows it cuts
the usage line and the native session the operator reads (`shipyard.reconcile.agent_result`).
"""

from __future__ import annotations

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


def _claude(run: AgentRun, instruction: str) -> str:
    return (
        'mkdir -p "$CLAUDE_CONFIG_DIR/debug" "$CLAUDE_CONFIG_DIR/projects" '
        '"$CLAUDE_CONFIG_DIR/shell-snapshots" "$CLAUDE_CONFIG_DIR/statsig" '
        '"$CLAUDE_CONFIG_DIR/todos" "$CLAUDE_CONFIG_DIR/skills"\n'
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
