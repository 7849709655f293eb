"""aider: run with `--yes` on the instruction file; its key is the provider's, exported for it."""

from __future__ import annotations

import shlex

from shipyard.agents.base import PYPI_HOSTS, AgentConfigError, AgentDef, Invocation, Option

VERSION = "0.86.1"

OPTIONS = {
    "reasoning_effort": Option(flag="--reasoning-effort {value}"),
    "thinking_tokens": Option(flag="--thinking-tokens {value}", kind=int),
    "cache_prompts": Option(flag="--cache-prompts", choices=("true",)),
    "auto_lint": Option(flag="--auto-lint", choices=("true",)),
    "auto_test": Option(flag="--auto-test", choices=("true",)),
    "test_cmd": Option(flag="--test-cmd {value}"),
    "map_tokens": Option(flag="--map-tokens {value}", kind=int),
}


def env(base_url: str | None, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    provider = model.split("/", 1)[0]
    if provider not in ("openai", "anthropic"):
        raise AgentConfigError("spec.agent.model", f"aider supports the openai and anthropic "
                                                   f"providers, not {provider!r}")
    if not base_url:
        return {}
    return {"OPENAI_API_BASE" if provider == "openai" else "ANTHROPIC_BASE_URL": base_url}


def command(call: Invocation) -> str:
    provider, name = call.model.split("/", 1)
    key = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    return (
        f'AIDER_API_KEY="{provider}=${{{key}:-}}"; export AIDER_API_KEY\n'
        f"aider --yes {call.flags}--model={shlex.quote(name)} "
        f"--message-file={call.instruction}"
    )


AGENT = AgentDef(
    "aider", VERSION, "aider", OPTIONS, env, command,
    install="python3 -m pip install aider-chat=={version}\n",
    model_has_provider=True, install_hosts=PYPI_HOSTS,
)
