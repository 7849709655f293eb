"""OpenHands: its headless main on the instruction file, with a local runtime in the pod."""

from __future__ import annotations

from shipyard.agents.base import PYPI_HOSTS, AgentDef, Invocation

VERSION = "0.62.0"


def env(base_url: str | None, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    environ = {
        "LLM_MODEL": model,
        "AGENT_ENABLE_PROMPT_EXTENSIONS": "false", "AGENT_ENABLE_BROWSING": "false",
        "ENABLE_BROWSER": "false", "SANDBOX_ENABLE_AUTO_LINT": "true",
        "SKIP_DEPENDENCY_CHECK": "1", "RUN_AS_OPENHANDS": "false", "RUNTIME": "local",
        "SU_TO_USER": "false", "SAVE_TRAJECTORY_PATH": "/logs/agent/openhands.trajectory.json",
        "FILE_STORE": "local", "FILE_STORE_PATH": "/logs/agent/", "LLM_LOG_COMPLETIONS": "true",
        "LLM_LOG_COMPLETIONS_FOLDER": "/logs/agent/completions/",
    }
    if base_url:
        environ["LLM_BASE_URL"] = base_url
    return environ


def command(call: Invocation) -> str:
    return ('SANDBOX_VOLUMES="${PWD}:/workspace:rw" USER="$(id -un)" '
            f"openhands-python -m openhands.core.main --file={call.instruction}")


AGENT = AgentDef(
    "openhands", VERSION, "openhands-python", {}, env, command,
    install=("python3 -m venv /opt/openhands-venv && /opt/openhands-venv/bin/pip install "
             "openhands-ai=={version} && ln -sf /opt/openhands-venv/bin/python "
             "/usr/local/bin/openhands-python\n"),
    install_hosts=PYPI_HOSTS,
)
