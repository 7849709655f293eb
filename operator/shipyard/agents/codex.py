"""codex: OpenAI's CLI (`codex exec`), run as Harbor runs it; the key reaches it through an
auth.json written from the exported variable, never a command line."""

from __future__ import annotations

import shlex
from typing import Any

from shipyard.agents import atif
from shipyard.agents.base import (
    NPM_HOSTS,
    NPM_INSTALL,
    USAGE_FILE,
    AgentDef,
    Invocation,
    NpmBundle,
    Option,
    Usage,
    UsageLike,
    bare_model,
    json_lines,
    last_event,
    to_int,
)

VERSION = "0.169.0"
CODEX_HOME = "/tmp/codex-home"
CODEX_SECRETS = "/tmp/codex-secrets"
LOG = "/logs/agent/codex.txt"

OPTIONS = {
    "reasoning_effort": Option(flag="-c model_reasoning_effort={value}"),
    "reasoning_summary": Option(flag="-c model_reasoning_summary={value}",
                                choices=("auto", "concise", "detailed", "none")),
}
DEFAULTS = {"reasoning_effort": "high"}  # Harbor's


def env(base_url: str | None, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    environ = {"CODEX_HOME": CODEX_HOME}
    if base_url:
        environ["OPENAI_BASE_URL"] = base_url
    return environ


def command(call: Invocation) -> str:
    setup = (
        f'mkdir -p "$CODEX_HOME" {CODEX_SECRETS} /logs/agent\n'
        # auth.json from the key exported by the runner (printf is a shell builtin: the key
        # is on no process's command line).
        f'(umask 077; printf \'{{\\n  "OPENAI_API_KEY": "%s"\\n}}\\n\' "${{OPENAI_API_KEY:-}}" '
        f"> {CODEX_SECRETS}/auth.json)\n"
        f'ln -sf {CODEX_SECRETS}/auth.json "$CODEX_HOME/auth.json"\n'
    )
    if call.base_url:  # codex honours openai_base_url only from config.toml
        setup += ('printf \'openai_base_url = "%s"\\n\' "$OPENAI_BASE_URL" '
                  '>> "$CODEX_HOME/config.toml"\n')
    return setup + (
        "codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check "
        f"--model {shlex.quote(bare_model(call.model))} --json --enable unified_exec "
        f"{call.flags}- < {call.instruction}"
    )


AFTER = (
    'if [ -d "$CODEX_HOME/sessions" ]; then rm -rf /logs/agent/sessions; '
    'cp -R "$CODEX_HOME/sessions" /logs/agent/sessions; fi\n'
    # The last token_count holds the session's running totals (summing every event would
    # count the same usage many times over: harbor #3289).
    "find /logs/agent/sessions -name '*.jsonl' -exec grep -h '\"token_count\"' {} + "
    f"2>/dev/null | grep '\"total_token_usage\"' | tail -n 1 > {USAGE_FILE}\n"
    f'rm -rf {CODEX_SECRETS} "$CODEX_HOME"\n'
)


def usage(text: str, model: str | None) -> Usage | None:
    """From the last `token_count` event of codex's session: its `total_token_usage` is the
    running total (input includes cached input). Codex reports no cost."""
    event = last_event(text)
    if event is None:
        return None
    payload = event.get("payload") if event.get("type") == "event_msg" else event
    info = (payload or {}).get("info") or {}
    total = info.get("total_token_usage")
    if not isinstance(total, dict):
        return None
    cost = info.get("total_cost", info.get("cost_usd"))
    return Usage(
        input_tokens=to_int(total.get("input_tokens")),
        cache_tokens=to_int(total.get("cached_input_tokens")),
        output_tokens=to_int(total.get("output_tokens")),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        model=model,
    )


def trajectory(stream: str, version: str, model: str | None,
               result: UsageLike | None = None) -> dict[str, Any] | None:
    """The items of its `--json` stream: agent messages, reasoning, command executions."""
    steps: list[dict[str, Any]] = []
    session = None
    for e in json_lines(stream):
        if e.get("type") == "thread.started":
            session = e.get("thread_id")
        if e.get("type") != "item.completed":
            continue
        item = e.get("item") or {}
        if item.get("type") == "agent_message":
            steps.append({"source": "agent", "model_name": model, "message": item.get("text", "")})
        elif item.get("type") == "reasoning":
            steps.append({"source": "agent", "model_name": model, "message": "",
                          "reasoning_content": item.get("text", "")})
        elif item.get("type") == "command_execution":
            call_id = item.get("id", "")
            steps.append({
                "source": "agent", "model_name": model, "message": "",
                "tool_calls": [{"tool_call_id": call_id, "function_name": "exec_command",
                                "arguments": {"cmd": item.get("command", "")}}],
                "observation": {"results": [{
                    "source_call_id": call_id, "content": item.get("aggregated_output", ""),
                    "extra": {"exit_code": item.get("exit_code")}}]},
            })
    return atif.trajectory("codex", version, model, session, steps, result)


VENDOR = "package/vendor/x86_64-unknown-linux-musl"
AGENT = AgentDef(
    "codex", VERSION, "codex", OPTIONS, env, command,
    install=NPM_INSTALL + "npm install -g @openai/codex@{version}\n",
    after=AFTER, default_kwargs=DEFAULTS, install_hosts=NPM_HOSTS, extra_collect=(USAGE_FILE,),
    native=LOG, usage=usage, trajectory=trajectory,
    # The statically linked (musl) binary and ripgrep, which run on glibc and musl images.
    bundle=NpmBundle("@openai/codex@{version}-linux-x64",
                     {f"{VENDOR}/bin/codex": "bin/codex", f"{VENDOR}/codex-path/rg": "bin/rg"}),
)
