"""mini-swe-agent: run with `--yolo` on the task, its trajectory kept with the logs."""

from __future__ import annotations

import shlex

from shipyard.agents.base import PYPI_HOSTS, AgentDef, Invocation, Option

VERSION = "1.17.3"
TRAJECTORY = "/logs/agent/mini-swe-agent.trajectory.json"

OPTIONS = {"cost_limit": Option(flag="--cost-limit {value}")}


def env(base_url: str | None, model: str, kwargs: dict[str, str]) -> dict[str, str]:
    environ = {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors"}
    if base_url:
        environ["OPENAI_API_BASE"] = base_url
    return environ


def command(call: Invocation) -> str:
    # The task is read by the shell inside the pod, never on an exec command line.
    return (
        f"mini-swe-agent --yolo --model={shlex.quote(call.model)} "
        f"--task=\"$(cat {call.instruction})\" "
        f"--output={TRAJECTORY} "
        f"{call.flags}--exit-immediately"
    )


AGENT = AgentDef(
    "mini-swe-agent", VERSION, "mini-swe-agent", OPTIONS, env, command,
    install="python3 -m pip install mini-swe-agent=={version}\n",
    model_has_provider=True, install_hosts=PYPI_HOSTS, extra_collect=(TRAJECTORY,),
)
