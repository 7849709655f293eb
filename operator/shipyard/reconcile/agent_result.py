"""An installed agent's own report of its run (`status.agentResult`) and Harbor's
classification of agent failures (`status.error.type`, docs/harbor.md §d.2 `ERROR_PATTERNS`).

The pod leaves one line cut from the agent's output in `USAGE_FILE`; each agent's module of
`shipyard.agents` reads its own (`usage`, `error`). Harbor's known gaps are fixed there:
claude-code's `total_cost_usd` is kept (harbor #965), codex usage is the last running total,
never a sum of snapshots (harbor #3289).
"""

from __future__ import annotations

import re
from dataclasses import asdict

from shipyard.agents import REGISTRY, claude_code
from shipyard.agents.base import json_lines
from shipyard.api.models import AgentResult

__all__ = ["ERROR_PATTERNS", "GENERIC_ERROR", "add_results", "agent_error", "agent_result",
           "classify_agent_error", "claude_code_error", "json_lines"]

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


def agent_result(agent: str, usage_text: str | None, model: str | None) -> AgentResult | None:
    """The agent's own report (`status.agentResult`), parsed by its module's `usage`."""
    definition = REGISTRY.get(agent)
    if definition is None or definition.usage is None or not usage_text:
        return None
    usage = definition.usage(usage_text, model)
    return None if usage is None else AgentResult(**asdict(usage))


def agent_error(agent: str, usage_text: str | None) -> str | None:
    """The failure the agent reported in its usage record, if its module reads one."""
    definition = REGISTRY.get(agent)
    if definition is None or definition.error is None or not usage_text:
        return None
    return definition.error(usage_text)


claude_code_error = claude_code.error


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
