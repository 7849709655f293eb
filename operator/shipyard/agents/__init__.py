"""Harbor's installed agents, one module each (its options, environment, install, run and
post-run scripts, usage and trajectory parsing, pinned version and bundle), registered in
`REGISTRY`, the one table the rest reads: `api.models.AgentName` (the CRD's enum),
`plan.agents` (the run), `render.agent_scripts` (the shell), `reconcile.agent_result` and
`reconcile.agent_trajectory` (what it reported), and the local cluster's bundle builder.

A seventh agent is a module here that declares `AGENT = AgentDef(...)`, and its line below.

Pure and standard-library only (a layer below `api`).
"""

from __future__ import annotations

from shipyard.agents import aider, claude_code, codex, gemini_cli, mini_swe_agent, openhands
from shipyard.agents.base import AgentDef

REGISTRY: dict[str, AgentDef] = {m.AGENT.name: m.AGENT for m in (
    claude_code,
    codex,
    gemini_cli,
    aider,
    mini_swe_agent,
    openhands,
)}
INSTALLED_AGENTS: tuple[str, ...] = tuple(REGISTRY)
BUILT_IN_AGENTS: tuple[str, ...] = ("oracle", "nop", "command")
"""The agents Shipyard runs itself (no installation)."""
