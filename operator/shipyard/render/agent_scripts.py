"""The shell an installed agent's phase runs (Harbor's command lines, docs/harbor.md §d.2), from
the run `shipyard.plan.agents` decided: the agent reads its instruction from `instruction` (stdin
or a `--*-file` option, never a command line), its output goes to its log, and what follows it cuts
the usage line and the native session the operator reads (`shipyard.reconcile.agent_result`).
Each agent's own command line, post-run script and install commands are in its module of
`shipyard.agents`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from shipyard.agents.base import AGENTS_ROOT, USAGE_FILE, Invocation
from shipyard.plan.agents import AgentRun, Option


def flags(options: Mapping[str, Option], kwargs: dict[str, str]) -> str:
    parts = [options[k].flag.replace("{value}", shlex.quote(v))  # type: ignore[union-attr]
             for k, v in kwargs.items() if options[k].flag]
    return "".join(p + " " for p in parts)


def agent_script(run: AgentRun, instruction: str) -> str:
    """The agent phase's command (POSIX sh): the agent, its output to its log, then what
    cuts the usage line and session; the agent's exit code is the phase's."""
    agent = run.agent
    call = Invocation(run.model, run.base_url, flags(run.options, run.kwargs), instruction)
    path = (f'export PATH="{AGENTS_ROOT}/{run.name}/bin:$PATH"\n' if run.bundled
            else 'export PATH="$HOME/.local/bin:/usr/local/bin:$PATH"\n')
    return (
        path
        + f"rm -f {USAGE_FILE}\n"
        + f"{{\n{agent.command(call)}\n}} > {run.log} 2>&1\n"
        + "rc=$?\n"
        + agent.after
        + 'exit "$rc"\n'
    )


def install_script(run: AgentRun) -> str:
    """Harbor's install commands (install: script; run as root before the agent)."""
    return "" if run.bundled else run.agent.install.format(version=run.version)
