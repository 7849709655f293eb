"""The `shipyard` command line."""

from __future__ import annotations

import os

import click

from shipyard import __version__
from shipyard.cli.common import ShipyardGroup


@click.group(cls=ShipyardGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shipyard")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              envvar="SHIPYARD_KUBECONFIG",
              help="Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).")
def main(kubeconfig: str | None) -> None:
    """Run Harbor-format agent-evaluation tasks on Kubernetes.

    \b
    shipyard task push DIR          create/update a Task from a Harbor task directory
    shipyard run DIR|TASK --watch   run a trial and follow it to its reward
    shipyard get [tasks|trials]     list them
    shipyard logs TRIAL             agent and verifier logs
    shipyard results [--json]       rewards, in Harbor's result.json shape with --json
    shipyard cancel TRIAL           stop a running trial, keeping its record and logs
    shipyard sweep run DIR... -a oracle -a nop -k 5 --watch   a benchmark sweep
    """
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig


def _register() -> None:
    from shipyard.cli.get_cmd import cancel_cmd, get_cmd, logs_cmd, results_cmd
    from shipyard.cli.operator_cmd import operator
    from shipyard.cli.run_cmd import run, watch_cmd
    from shipyard.cli.sweep_cmd import sweep
    from shipyard.cli.task_cmd import task

    main.add_command(task)
    main.add_command(run)
    main.add_command(watch_cmd)
    main.add_command(get_cmd)
    main.add_command(logs_cmd)
    main.add_command(results_cmd)
    main.add_command(cancel_cmd)
    main.add_command(operator)
    main.add_command(sweep)


_register()
