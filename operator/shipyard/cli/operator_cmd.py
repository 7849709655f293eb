"""`shipyard operator`: run the operator (in a pod, or from a checkout against any cluster)."""

from __future__ import annotations

import click

from shipyard.plan.settings import METRICS_PORT, METRICS_PORT_ENV


@click.command("operator")
@click.option("--namespace", "-n", "namespaces", multiple=True,
              help="Serve only these namespaces (repeatable); default: the whole cluster. "
                   "Globs and exclusions work: -n 'team-*' or -n '!shipyard-*' (every "
                   "namespace but those; needs list/watch on namespaces).")
@click.option("--liveness", default="http://0.0.0.0:8080/healthz", show_default=True,
              help="Liveness endpoint URL; empty to disable.")
@click.option("--metrics-port", type=int, default=METRICS_PORT, show_default=True,
              envvar=METRICS_PORT_ENV, show_envvar=True,
              help="Port of the Prometheus /metrics endpoint (all addresses); 0: a free port "
                   "(logged), negative: off. A port in use leaves the endpoint off (logged), "
                   "not the operator.")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def operator(namespaces: tuple[str, ...], liveness: str, metrics_port: int,
             verbose: bool) -> None:
    """Run the Shipyard operator (kopf) until interrupted."""
    import logging

    from shipyard.handlers.operator import run

    # kopf's health endpoint is probed every few seconds; its access log is noise.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    run(list(namespaces), liveness or None, verbose, metrics_port)
