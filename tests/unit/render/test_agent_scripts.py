"""Installed agents' run scripts (`shipyard.render.agent_scripts`) with their environments
(`shipyard.plan.agents`), as Harbor's command lines (docs/harbor.md §d.2), with the
instruction from a file and no key anywhere."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import pytest

from shipyard.api.models import AgentSpec
from shipyard.plan.agents import AGENTS, USAGE_FILE, agent_run
from shipyard.render.agent_scripts import agent_script, install_script

INSTRUCTION = "/shipyard/instruction.md"


def run(**spec: Any) -> SimpleNamespace:
    """The agent's run with its rendered script and install commands."""
    r = agent_run(AgentSpec.model_validate(spec))
    return SimpleNamespace(**{f.name: getattr(r, f.name) for f in fields(r)},
                           script=agent_script(r, INSTRUCTION),
                           install_script=install_script(r) or None)


def test_claude_code_command_line_and_env_are_harbors() -> None:
    r = run(name="claude-code", model="anthropic/claude-sonnet-4-5",
            kwargs={"max_turns": "30", "reasoning_effort": "high"})
    assert ("claude --verbose --output-format=stream-json --permission-mode=bypassPermissions "
            f"--max-turns 30 --effort high --print < {INSTRUCTION}") in r.script
    assert r.env["ANTHROPIC_MODEL"] == "claude-sonnet-4-5"  # provider stripped for Anthropic
    assert r.env["CLAUDE_CONFIG_DIR"] == "/logs/agent/sessions"
    assert r.env["IS_SANDBOX"] == "1"
    assert r.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "ANTHROPIC_BASE_URL" not in r.env
    assert r.log == "/logs/agent/claude-code.txt"
    assert r.collect == ("/logs/agent/claude-code.txt", USAGE_FILE,
                         "/logs/agent/claude-code.session.jsonl")
    assert 'export PATH="/shipyard/agents/claude-code/bin:$PATH"' in r.script
    assert r.bundle_image == "localhost/shipyard/agent-claude-code:2.1.330"
    assert f"> {USAGE_FILE}" in r.script


def test_claude_code_with_a_base_url_keeps_the_model_and_sets_every_alias() -> None:
    r = run(name="claude-code", model="stub-solve", baseURL="http://10.96.0.9:8000/v1")
    assert r.env["ANTHROPIC_BASE_URL"] == "http://10.96.0.9:8000"  # claude adds /v1 itself
    for alias in ("ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
                  "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
        assert r.env[alias] == "stub-solve"


def test_codex_command_line_reads_the_instruction_from_stdin() -> None:
    r = run(name="codex", model="openai/gpt-5", baseURL="http://10.0.0.1:8000/v1",
            version="0.170.0")
    assert ("codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check "
            "--model gpt-5 --json --enable unified_exec -c model_reasoning_effort=high "
            f"- < {INSTRUCTION}") in r.script
    assert r.env["CODEX_HOME"] == "/tmp/codex-home"
    assert r.env["OPENAI_BASE_URL"] == "http://10.0.0.1:8000/v1"
    assert 'openai_base_url = "%s"' in r.script
    assert r.bundle_image == "localhost/shipyard/agent-codex:0.170.0"
    # auth.json is written by the shell from the exported key, then removed.
    assert '"${OPENAI_API_KEY:-}"' in r.script and "rm -rf /tmp/codex-secrets" in r.script


@pytest.mark.parametrize(("name", "model", "expected"), [
    ("gemini-cli", "google/gemini-2.5-pro",
     f"gemini --yolo --model=gemini-2.5-pro --prompt='' < {INSTRUCTION}"),
    ("aider", "openai/gpt-4o", f"aider --yes --model=gpt-4o --message-file={INSTRUCTION}"),
    ("mini-swe-agent", "anthropic/claude-sonnet-4-5",
     f'mini-swe-agent --yolo --model=anthropic/claude-sonnet-4-5 --task="$(cat {INSTRUCTION})"'),
    ("openhands", "anthropic/claude-sonnet-4-5",
     f"openhands-python -m openhands.core.main --file={INSTRUCTION}"),
])
def test_other_agents_read_the_instruction_file(name: str, model: str, expected: str) -> None:
    r = run(name=name, model=model)
    assert expected in r.script
    assert r.log == f"/logs/agent/{name}.txt"
    assert r.bundle_image and f"agent-{name}:" in r.bundle_image


def test_aider_key_comes_from_the_exported_provider_key() -> None:
    r = run(name="aider", model="anthropic/claude-sonnet-4-5")
    assert 'AIDER_API_KEY="anthropic=${ANTHROPIC_API_KEY:-}"' in r.script


@pytest.mark.parametrize("name", list(AGENTS))
def test_no_script_has_an_instruction_or_a_key_in_it(name: str) -> None:
    spec = {"name": name, "model": "openai/m", "env": [{"name": "X", "value": "1"}]}
    r = run(**spec)
    assert "Write hello" not in r.script
    assert "sk-" not in r.script and "sk-" not in str(r.env)
    # The script is valid POSIX sh.
    subprocess.run(["sh", "-n", "-c", r.script], check=True)


def test_install_script_runs_harbors_install_and_uses_no_bundle() -> None:
    r = run(name="codex", model="m", install="script", version="0.169.0")
    assert r.bundle_image is None
    assert r.install_script and "npm install -g @openai/codex@0.169.0" in r.install_script
    assert "registry.npmjs.org" in r.install_hosts


def test_kwargs_are_shell_quoted() -> None:
    r = run(name="claude-code", model="m", kwargs={"append_system_prompt": "be 'brief'; rm"})
    assert "--append-system-prompt " + shlex.quote("be 'brief'; rm") in r.script


def test_the_script_keeps_the_agents_exit_code_and_cuts_the_usage_line(tmp_path) -> None:
    """Run the real script with a fake `claude` printing a stream and exiting 3."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(
        '#!/bin/sh\ncat >/dev/null\necho \'{"type":"system"}\'\n'
        'echo \'{"type":"result","total_cost_usd":0.5,"usage":{"input_tokens":1}}\'\nexit 3\n')
    (bin_dir / "claude").chmod(0o755)
    r = run(name="claude-code", model="m")
    logs = tmp_path / "logs"
    script = (r.script.replace("/shipyard/agents/claude-code/bin", str(bin_dir))
              .replace("/logs/agent", str(logs)).replace(INSTRUCTION, "/dev/null"))
    logs.mkdir()
    env = {"PATH": "/usr/bin:/bin", "CLAUDE_CONFIG_DIR": str(tmp_path / "s")}
    done = subprocess.run(["sh", "-c", script], env=env)
    assert done.returncode == 3
    assert (logs / "shipyard-usage.json").read_text().startswith('{"type":"result"')
