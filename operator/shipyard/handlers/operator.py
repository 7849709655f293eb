"""The operator process: kopf settings and the entry point behind `shipyard operator`."""

from __future__ import annotations

import asyncio
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

# Importing registers the handlers with kopf.
from shipyard.handlers import image_builds, pod_watch, tasks, trials  # noqa: F401
from shipyard.kube.client import requests_made

THREADS = 64


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(THREADS))
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    settings.persistence.finalizer = "shipyard.dev/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="shipyard.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="shipyard.dev", key="last-handled-configuration"
    )
    # Our own Events are posted explicitly (kopf.event); kopf's per-handler log lines are not.
    settings.posting.level = logging.WARNING
    # `kubectl describe` shows who speaks: "From shipyard-operator", not "From kopf".
    settings.posting.reporting_component = "shipyard-operator"
    settings.posting.reporting_instance = socket.gethostname()
    settings.execution.max_workers = THREADS


@kopf.on.cleanup()
async def report(logger: logging.Logger, **_: Any) -> None:
    """bench/ reads this line: Shipyard's own API requests, kopf's watches not included."""
    logger.info(f"shipyard api requests: {requests_made()}")


def run(namespaces: list[str], liveness: str | None, verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=liveness,
            standalone=True,
        )
    )
