"""The agent registry: one module per installed agent, one table, read by every layer and by
the local cluster's bundle builder."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

import shipyard.agents
from shipyard.agents import BUILT_IN_AGENTS, INSTALLED_AGENTS, REGISTRY
from shipyard.agents.base import AgentDef, Invocation
from shipyard.api.models import AgentName, AgentSpec
from shipyard.plan.agents import AGENTS, agent_run

ROOT = Path(__file__).resolve().parents[3]
SHARED = {"base", "atif"}  # what the agents' modules share; every other module is an agent


def test_agent_name_is_the_built_in_agents_and_the_registry() -> None:
    assert get_args(AgentName) == (*BUILT_IN_AGENTS, *REGISTRY)
    assert tuple(REGISTRY) == INSTALLED_AGENTS and AGENTS is REGISTRY
    assert not set(BUILT_IN_AGENTS) & set(REGISTRY)


def test_every_agent_module_is_registered_under_its_own_name() -> None:
    modules = {m.name for m in pkgutil.iter_modules(shipyard.agents.__path__)} - SHARED
    assert {m.replace("_", "-") for m in modules} == set(REGISTRY)
    for module in modules:
        agent = importlib.import_module(f"shipyard.agents.{module}").AGENT
        assert isinstance(agent, AgentDef) and REGISTRY[agent.name] is agent


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_agent_declares_a_complete_definition(name: str) -> None:
    agent = REGISTRY[name]
    assert agent.default_version and agent.executable
    assert "{version}" in agent.install
    assert agent.log == f"/logs/agent/{name}.txt"
    for option, spec in agent.options.items():
        assert spec.flag or spec.env, option
    assert set(agent.default_kwargs) <= set(agent.options)
    if agent.web_tools is not None:
        assert agent.web_tools[0] in agent.options
    if agent.trajectory is not None:  # a trajectory is made from a collected native record
        assert agent.native is not None
    script = agent.command(Invocation("openai/m", "https://x.example/v1", "", "/tmp/in"))
    subprocess.run(["sh", "-n", "-c", script + "\n" + agent.after], check=True)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_the_run_is_the_registered_agent_at_its_pinned_version(name: str) -> None:
    run = agent_run(AgentSpec.model_validate({"name": name, "model": "openai/m"}))
    assert run.agent is REGISTRY[name] and run.version == REGISTRY[name].default_version
    assert run.bundle_image == f"localhost/shipyard/agent-{name}:{run.version}"


def test_the_bundle_builder_reads_the_registry() -> None:
    """hack/localcluster/agent_bundles.py builds the bundles the registry declares, at the
    versions the operator pins, from system Python (no virtualenv)."""
    script = ("import sys; sys.path.insert(0, '.')\n"
              "import agent_bundles as a\n"
              "for b in a.BUNDLES.values(): print(b.agent, b.version, b.tag)\n")
    # -S: no site-packages at all, so neither pydantic nor the installed package is there.
    out = subprocess.run([sys.executable, "-S", "-c", script], check=True, text=True,
                         capture_output=True, cwd=ROOT / "hack" / "localcluster").stdout
    declared = {(n, a.default_version, f"localhost/shipyard/agent-{n}:{a.default_version}")
                for n, a in REGISTRY.items() if a.bundle is not None}
    assert {tuple(line.split()) for line in out.splitlines()} == declared
    assert declared  # claude-code, codex and gemini-cli have bundles


def test_an_agent_line_nested_thousands_deep_is_skipped_not_a_recursion_error():
    from shipyard.agents.base import json_lines

    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    assert json_lines(f'{deep}\n{{"usage": 1}}\n') == [{"usage": 1}]
