"""An installed agent's run as an ATIF trajectory (Harbor's `trajectory.json`, schema in
`harbor.models.trajectories`), from the agent's native output collected from the pod; each
agent's module of `shipyard.agents` converts its own (`trajectory`)."""

from __future__ import annotations

from typing import Any

from shipyard.agents import REGISTRY
from shipyard.agents.atif import SCHEMA_VERSION
from shipyard.agents.claude_code import trajectory as claude_code_trajectory
from shipyard.agents.codex import trajectory as codex_trajectory
from shipyard.agents.gemini_cli import trajectory as gemini_trajectory
from shipyard.api.models import AgentResult

__all__ = ["SCHEMA_VERSION", "agent_trajectory", "claude_code_trajectory", "codex_trajectory",
           "gemini_trajectory"]


def agent_trajectory(agent: str, native: str | None, version: str, model: str | None,
                     result: AgentResult | None) -> dict[str, Any] | None:
    definition = REGISTRY.get(agent)
    if not native or definition is None or definition.trajectory is None:
        return None
    return definition.trajectory(native, version, model, result)
