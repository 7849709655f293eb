"""The task's MCP servers in the installed agents' own configuration, as Harbor writes it
(issue 25): claude-code's ~/.claude.json, codex's config.toml, gemini-cli's settings.json."""

from __future__ import annotations

import json
import subprocess
import tomllib

import pytest

from shipyard.plan.agents import AgentConfigError, AgentRun, with_mcp_servers
from shipyard.plan.phases import PlanError
from shipyard.render.agent_scripts import (
    agent_script,
    claude_mcp_json,
    codex_mcp_toml,
    gemini_mcp_servers,
)
from shipyard.taskformat import MCPServerConfig
from tests.unit.helpers import plan_for, task

SERVERS = [MCPServerConfig(name="notes", transport="streamable-http",
                           url="http://notes:8000/mcp"),
           MCPServerConfig(name="events", transport="sse", url="http://events:9000/sse"),
           MCPServerConfig(name="local", transport="stdio", command="python3",
                           args=["-m", "srv"])]


def _run(name: str) -> AgentRun:
    return with_mcp_servers(AgentRun(name=name, version="1", model="p/m", base_url=None,
                                     kwargs={}, env={}, log="/logs/agent/x.txt", collect=(),
                                     bundle_image="b"), SERVERS)


def test_claude_code_gets_user_scoped_servers():
    assert json.loads(claude_mcp_json(_run("claude-code"))) == {"mcpServers": {
        "notes": {"type": "http", "url": "http://notes:8000/mcp"},
        "events": {"type": "sse", "url": "http://events:9000/sse"},
        "local": {"type": "stdio", "command": "python3", "args": ["-m", "srv"]}}}
    assert '"$CLAUDE_CONFIG_DIR/.claude.json"' in agent_script(_run("claude-code"), "/i")


def test_codex_gets_mcp_server_tables():
    assert tomllib.loads(codex_mcp_toml(_run("codex"))) == {"mcp_servers": {
        "notes": {"url": "http://notes:8000/mcp"}, "events": {"url": "http://events:9000/sse"},
        "local": {"command": "python3", "args": ["-m", "srv"]}}}


@pytest.mark.parametrize("key", ["", "k"])
def test_gemini_cli_settings_keep_the_auth_and_add_the_servers(tmp_path, key):
    lines = agent_script(_run("gemini-cli"), "/i").splitlines()
    setup = lines[lines.index("{") + 1:next(i for i, line in enumerate(lines)
                                            if line.startswith("gemini "))]
    subprocess.run(["sh", "-c", "\n".join(setup)], check=True,
                   env={"HOME": str(tmp_path), "GEMINI_API_KEY": key, "PATH": "/usr/bin:/bin"})
    settings = json.loads((tmp_path / ".gemini" / "settings.json").read_text())
    assert settings["mcpServers"] == gemini_mcp_servers(_run("gemini-cli"))
    assert settings["mcpServers"]["notes"] == {"httpUrl": "http://notes:8000/mcp"}
    assert ("security" in settings) == bool(key)


def test_agents_without_mcp_support_and_headers_are_refused():
    with pytest.raises(AgentConfigError, match="aider does not support them"):
        _run("aider")
    headers = [MCPServerConfig(name="n", transport="sse", url="http://n/sse",
                               headers={"Authorization": "Bearer ${TOKEN}"})]
    with pytest.raises(AgentConfigError, match="HTTP headers"):
        with_mcp_servers(_run("codex"), headers)


def test_the_plan_gives_the_task_servers_to_the_installed_agent():
    loaded = task(extra={"task.toml": '[environment]\ndocker_image = "x"\n'
                         '[[environment.mcp_servers]]\nname = "notes"\n'
                         'transport = "streamable-http"\nurl = "http://notes:8000/mcp"\n'})
    plan = plan_for(loaded, agent={"name": "claude-code", "model": "anthropic/claude"})
    [agent] = [p for p in plan.phases if p.name == "agent"]
    assert [s.name for s in agent.script.run.mcp_servers] == ["notes"]
    with pytest.raises(PlanError, match="aider does not support them"):
        plan_for(loaded, agent={"name": "aider", "model": "openai/gpt"})
