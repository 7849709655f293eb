"""claude-code: Anthropic's CLI, run as Harbor runs it (stream-json output, permissions
bypassed, its config and sessions under /logs/agent/sessions)."""

from __future__ import annotations

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
    option_env,
    to_int,
)

VERSION = "2.1.330"
SESSION = "/logs/agent/claude-code.session.jsonl"

OPTIONS = {
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


def env(base_url: str | None, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    environ = {"FORCE_AUTO_BACKGROUND_TASKS": "1", "ENABLE_BACKGROUND_TASKS": "1"}
    if base_url:
        # Claude's client adds /v1 itself.
        environ["ANTHROPIC_BASE_URL"] = base_url.rstrip("/").removesuffix("/v1")
    if model:
        environ["ANTHROPIC_MODEL"] = model if base_url else bare_model(model)
    if base_url and model:
        for alias in ("ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
                      "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
            environ[alias] = environ["ANTHROPIC_MODEL"]
    environ.update({
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",
        **option_env(OPTIONS, kwargs),
        "CLAUDE_CONFIG_DIR": "/logs/agent/sessions",
    })
    return environ


def command(call: Invocation) -> str:
    return (
        'mkdir -p "$CLAUDE_CONFIG_DIR/debug" "$CLAUDE_CONFIG_DIR/projects" '
        '"$CLAUDE_CONFIG_DIR/shell-snapshots" "$CLAUDE_CONFIG_DIR/statsig" '
        '"$CLAUDE_CONFIG_DIR/todos" "$CLAUDE_CONFIG_DIR/skills"\n'
        "claude --verbose --output-format=stream-json --permission-mode=bypassPermissions "
        f"{call.flags}--print < {call.instruction}"
    )


# The stream's last `result` event carries usage, num_turns and total_cost_usd; the session's
# user and assistant events become the ATIF trajectory (the rest of it, e.g. the system
# prompt's request blobs, is left out: it would crowd out the conversation).
AFTER = (
    f"grep '\"type\":\"result\"' /logs/agent/claude-code.txt | tail -n 1 > {USAGE_FILE}\n"
    "find \"$CLAUDE_CONFIG_DIR/projects\" -name '*.jsonl' -exec grep -h "
    "-e '\"type\":\"user\"' -e '\"type\":\"assistant\"' {} + "
    f"> {SESSION} 2>/dev/null\n"
)


def usage(text: str, model: str | None) -> Usage | None:
    """From claude-code's stream-json `result` event: input tokens include cache reads and
    writes (as Harbor's n_input_tokens), cache = cache reads, cost = `total_cost_usd` (kept,
    unlike Harbor: harbor #965)."""
    event = last_event(text)
    if event is None or event.get("type") != "result":
        return None
    counts = event.get("usage") or {}
    fresh = to_int(counts.get("input_tokens"))
    read = to_int(counts.get("cache_read_input_tokens")) or 0
    written = to_int(counts.get("cache_creation_input_tokens")) or 0
    models = list((event.get("modelUsage") or {}).keys())
    cost = event.get("total_cost_usd")
    return Usage(
        input_tokens=None if fresh is None else fresh + read + written,
        cache_tokens=read,
        output_tokens=to_int(counts.get("output_tokens")),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        model=models[0] if len(models) == 1 else model,
        turns=to_int(event.get("num_turns")),
    )


def error(text: str) -> str | None:
    """claude-code reports API failures in its `result` event (is_error) even when the process
    exit code does not say what went wrong; the event's text is classified like the log."""
    event = last_event(text)
    if event is None or event.get("type") != "result" or not event.get("is_error"):
        return None
    status = event.get("api_error_status")
    prefix = f"HTTP {status}: " if isinstance(status, int) else ""
    return prefix + str(event.get("result") or event.get("subtype") or "agent error")


def trajectory(session_jsonl: str, version: str, model: str | None,
               result: UsageLike | None = None) -> dict[str, Any] | None:
    """The user/assistant events of its session JSONL, one API response spread over several
    events joined by `message.id`, tool results attached to the step that called the tool."""
    events = [e for e in json_lines(session_jsonl)
              if e.get("type") in ("user", "assistant") and not e.get("isSidechain")]
    seen: set[str] = set()
    unique = []
    for e in events:
        uid = e.get("uuid")
        if isinstance(uid, str) and uid in seen:
            continue
        if isinstance(uid, str):
            seen.add(uid)
        unique.append(e)
    unique.sort(key=lambda e: e.get("timestamp") or "")
    steps: list[dict[str, Any]] = []
    by_message: dict[str, dict[str, Any]] = {}
    by_call: dict[str, dict[str, Any]] = {}
    session = next((e["sessionId"] for e in unique if isinstance(e.get("sessionId"), str)), None)
    for e in unique:
        message = e.get("message") or {}
        content = message.get("content")
        if e["type"] == "user":
            results = [b for b in content if isinstance(b, dict)
                       and b.get("type") == "tool_result"] if isinstance(content, list) else []
            for block in results:
                step = by_call.get(block.get("tool_use_id", ""))
                if step is not None:
                    step.setdefault("observation", {"results": []})["results"].append(
                        {"source_call_id": block.get("tool_use_id"),
                         "content": atif.result_text(block.get("content"))})
            if not results and atif.text_of(content):
                steps.append({"timestamp": e.get("timestamp"), "source": "user",
                              "message": atif.text_of(content)})
            continue
        key = message.get("id") or e.get("uuid") or str(len(steps))
        step = by_message.get(key)
        if step is None:
            step = {"timestamp": e.get("timestamp"), "source": "agent",
                    "model_name": message.get("model") or model, "message": ""}
            counts = message.get("usage") or {}
            if counts:
                read = counts.get("cache_read_input_tokens") or 0
                step["metrics"] = {
                    "prompt_tokens": (counts.get("input_tokens") or 0) + read
                    + (counts.get("cache_creation_input_tokens") or 0),
                    "completion_tokens": counts.get("output_tokens"),
                    "cached_tokens": read,
                }
            by_message[key] = step
            steps.append(step)
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                step["message"] = "\n".join(t for t in (step["message"], block["text"]) if t)
            elif block.get("type") == "thinking" and block.get("thinking"):
                step["reasoning_content"] = block["thinking"]
            elif block.get("type") == "tool_use":
                step.setdefault("tool_calls", []).append({
                    "tool_call_id": block.get("id", ""), "function_name": block.get("name", ""),
                    "arguments": block.get("input") or {}})
                by_call[block.get("id", "")] = step
    return atif.trajectory("claude-code", version, model, session, steps, result)


AGENT = AgentDef(
    "claude-code", VERSION, "claude", OPTIONS, env, command,
    install=NPM_INSTALL + "npm install -g @anthropic-ai/claude-code@{version}\n",
    after=AFTER, install_hosts=NPM_HOSTS, extra_collect=(USAGE_FILE, SESSION), native=SESSION,
    web_tools=("disallowed_tools", "WebSearch,WebFetch"),
    usage=usage, trajectory=trajectory, error=error,
    # The native binary of the linux-x64 package (glibc).
    bundle=NpmBundle("@anthropic-ai/claude-code-linux-x64@{version}",
                     {"package/claude": "bin/claude"}),
)
