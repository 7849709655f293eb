"""An installed agent's own report of its run (`status.agentResult`) and Harbor's
classification of agent failures (`status.error.type`, docs/harbor.md §d.2 `ERROR_PATTERNS`).

The pod leaves one line cut from the agent's output in `USAGE_FILE` (see
`shipyard.plan.agents`); these functions read it. Harbor's known gaps are fixed here: claude-code's
`total_cost_usd` is kept (harbor #965), codex usage is the last running total, never a sum of
snapshots (harbor #3289).
"""

from __future__ import annotations

import json
import re
from typing import Any

from shipyard.api.models import AgentResult

# (pattern, Harbor exception) in Harbor's order; the LAST pattern that matches wins, so the
# specific classes come after the generic ones.
ERROR_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), e) for p, e in (
        (r"network ?error|connection (?:refused|reset|error)|ECONNREFUSED|ENOTFOUND|"
         r"getaddrinfo|unable to connect", "NetworkConnectionError"),
        (r"internal server error|\b500\b.*(?:error|status)|api_error", "ApiInternalServerError"),
        (r"overloaded", "ApiOverloadedError"),
        (r"usage limit|insufficient_quota|credit balance is too low", "ApiUsageLimitError"),
        (r"model[_ ]not[_ ]found|does not exist or you do not have access|"
         r"unknown model|invalid model", "ModelNotFoundError"),
        (r"max_tokens|output token (?:limit|maximum)|maximum output tokens",
         "OutputTokenExceededError"),
        (r"context[_ ]length|context window|prompt is too long|maximum context|"
         r"too many tokens|context_length_exceeded", "ContextWindowExceededError"),
        (r"\b401\b|unauthorized|authentication[_ ]error|invalid (?:x-)?api[_ -]?key|"
         r"incorrect api key|invalid_api_key|please run /login|not logged in",
         "AgentAuthenticationError"),
        (r"rate.?limit|too many requests|\b429\b", "ApiRateLimitError"),
    )
)
GENERIC_ERROR = "NonZeroAgentExitCodeError"


def classify_agent_error(output: str) -> str:
    """Harbor's exception name for a failed agent whose output (log tail) is `output`."""
    found = GENERIC_ERROR
    for pattern, name in ERROR_PATTERNS:
        if pattern.search(output):
            found = name
    return found


def _int(value: Any) -> int | None:
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
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


def _event(text: str) -> dict[str, Any] | None:
    events = json_lines(text)
    return events[-1] if events else None


def claude_code_result(text: str, model: str | None) -> AgentResult | None:
    """From claude-code's stream-json `result` event: input tokens include cache reads and
    writes (as Harbor's n_input_tokens), cache = cache reads, cost = `total_cost_usd`."""
    event = _event(text)
    if event is None or event.get("type") != "result":
        return None
    usage = event.get("usage") or {}
    fresh = _int(usage.get("input_tokens"))
    read = _int(usage.get("cache_read_input_tokens")) or 0
    written = _int(usage.get("cache_creation_input_tokens")) or 0
    models = list((event.get("modelUsage") or {}).keys())
    cost = event.get("total_cost_usd")
    return AgentResult(
        input_tokens=None if fresh is None else fresh + read + written,
        cache_tokens=read,
        output_tokens=_int(usage.get("output_tokens")),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        model=models[0] if len(models) == 1 else model,
        turns=_int(event.get("num_turns")),
    )


def codex_result(text: str, model: str | None) -> AgentResult | None:
    """From the last `token_count` event of codex's session: its `total_token_usage` is the
    running total (input includes cached input). Codex reports no cost."""
    event = _event(text)
    if event is None:
        return None
    payload = event.get("payload") if event.get("type") == "event_msg" else event
    info = (payload or {}).get("info") or {}
    total = info.get("total_token_usage")
    if not isinstance(total, dict):
        return None
    cost = info.get("total_cost", info.get("cost_usd"))
    return AgentResult(
        input_tokens=_int(total.get("input_tokens")),
        cache_tokens=_int(total.get("cached_input_tokens")),
        output_tokens=_int(total.get("output_tokens")),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        model=model,
    )


def gemini_result(text: str, model: str | None) -> AgentResult | None:
    """From gemini-cli's session JSONL: each model message once (the last copy of its id),
    output = output + thoughts + tool tokens, as Harbor counts them. No cost is reported."""
    messages = {str(e.get("id")): e for e in json_lines(text)
                if e.get("type") == "gemini" and e.get("tokens")}
    if not messages:
        return None

    def total(*keys: str) -> int:
        return sum(_int(m["tokens"].get(k)) or 0 for m in messages.values() for k in keys)

    models = {m.get("model") for m in messages.values() if m.get("model")}
    return AgentResult(
        input_tokens=total("input"), cache_tokens=total("cached"),
        output_tokens=total("output", "thoughts", "tool"),
        model=models.pop() if len(models) == 1 else model, turns=len(messages),
    )


PARSERS = {"claude-code": claude_code_result, "codex": codex_result,
           "gemini-cli": gemini_result}


def agent_result(agent: str, usage_text: str | None, model: str | None) -> AgentResult | None:
    parser = PARSERS.get(agent)
    if parser is None or not usage_text:
        return None
    return parser(usage_text, model)


def claude_code_error(text: str) -> str | None:
    """claude-code reports API failures in its `result` event (is_error) even when the process
    exit code does not say what went wrong; the event's text is classified like the log."""
    event = _event(text)
    if event is None or event.get("type") != "result" or not event.get("is_error"):
        return None
    status = event.get("api_error_status")
    prefix = f"HTTP {status}: " if isinstance(status, int) else ""
    return prefix + str(event.get("result") or event.get("subtype") or "agent error")


def add_results(a: AgentResult | None, b: AgentResult) -> AgentResult:
    """Two runs' results together (the steps of a multi-step trial, the trials of a sweep)."""
    if a is None:
        return b

    def total(x: float | None, y: float | None) -> float | None:
        return None if x is None and y is None else (x or 0) + (y or 0)

    return AgentResult(
        input_tokens=total(a.input_tokens, b.input_tokens),  # type: ignore[arg-type]
        cache_tokens=total(a.cache_tokens, b.cache_tokens),  # type: ignore[arg-type]
        output_tokens=total(a.output_tokens, b.output_tokens),  # type: ignore[arg-type]
        cost_usd=total(a.cost_usd, b.cost_usd),
        model=a.model if a.model == b.model else a.model or b.model,
        turns=total(a.turns, b.turns),  # type: ignore[arg-type]
    )
