"""The operator's Prometheus metrics (docs/observability.md): the `/metrics` endpoint, the
controller series (reconciles, their time and errors, the work queue) and the domain series
(Trials by phase, phase durations, time to a running pod and to a reward, outcomes, image
builds, queued trials). The API request and exec series are the kube layer's
(`shipyard.kube.metrics`); what a finished Trial tells is `shipyard.reconcile.trial_metrics`.

Labels are bounded: kinds, results, phases, reasons and namespaces, never a trial or task name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shipyard.api.conventions import is_finished_phase
from shipyard.reconcile.trial_metrics import (
    DURATION_BUCKETS,
    TRIAL_PHASES,
    finished_trial,
    trial_phase_label,
)

log = logging.getLogger(__name__)

RECONCILE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

RECONCILES = Counter("shipyard_reconcile_total", "Reconcile passes by kind and result.",
                     ["kind", "result"])
RECONCILE_ERRORS = Counter("shipyard_reconcile_errors_total",
                           "Reconcile passes that raised, by kind.", ["kind"])
RECONCILE_TIME = Histogram("shipyard_reconcile_duration_seconds",
                           "Time of a reconcile pass, by kind.", ["kind"],
                           buckets=RECONCILE_BUCKETS)
PHASE_TIME = Histogram("shipyard_trial_phase_duration_seconds",
                       "Duration of the phases of finished Trials (environment, setup, agent, "
                       "verifier...).", ["phase"], buckets=DURATION_BUCKETS)
TO_RUNNING = Histogram("shipyard_trial_time_to_running_seconds",
                       "From a Trial's creation to its pod running (its environment phase "
                       "ended).", buckets=DURATION_BUCKETS)
TO_REWARD = Histogram("shipyard_trial_time_to_reward_seconds",
                      "From a Trial's creation to its reward.", buckets=DURATION_BUCKETS)
OUTCOMES = Counter("shipyard_trial_outcomes_total",
                   "Finished Trials by the reason of their terminal condition.",
                   ["reason"])
BUILDS = Counter("shipyard_image_builds_total", "Finished ImageBuilds by result.", ["result"])
BUILD_TIME = Histogram("shipyard_image_build_duration_seconds",
                       "Duration of finished ImageBuilds, by result.", ["result"],
                       buckets=DURATION_BUCKETS)


class _State(Collector):
    """Gauges read when scraped: Trials by phase and namespace (from the Trial watch), queued
    sweep trials, the blocking-call queue and the trial drivers."""

    def __init__(self) -> None:
        self.trials: dict[tuple[str, str], str] = {}
        self.queued: dict[tuple[str, str], int] = {}
        self.sweep_namespaces: set[str] = set()
        self.queue_depth: Callable[[], int] = lambda: 0
        self.drivers: Callable[[], int] = lambda: 0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        trials = GaugeMetricFamily("shipyard_trials", "Trials by phase and namespace.",
                                   labels=["phase", "namespace"])
        counts: dict[tuple[str, str], int] = {}
        for (namespace, _), phase in list(self.trials.items()):
            counts[(phase, namespace)] = counts.get((phase, namespace), 0) + 1
        for namespace in sorted({ns for ns, _ in self.trials}):
            for phase in TRIAL_PHASES:
                trials.add_metric([phase, namespace], counts.get((phase, namespace), 0))
        yield trials
        queued = GaugeMetricFamily("shipyard_sweep_queued_trials",
                                   "Planned Sweep trials not created yet, by namespace.",
                                   labels=["namespace"])
        per_ns = dict.fromkeys(self.sweep_namespaces, 0)  # 0 once their sweeps are done
        for (namespace, _), n in list(self.queued.items()):
            per_ns[namespace] = per_ns.get(namespace, 0) + n
        for namespace, n in sorted(per_ns.items()):
            queued.add_metric([namespace], n)
        yield queued
        yield GaugeMetricFamily("shipyard_work_queue_depth",
                                "Blocking API calls waiting for a thread.",
                                value=self.queue_depth())
        yield GaugeMetricFamily("shipyard_trial_drivers", "Trials being driven now.",
                                value=self.drivers())


for _result in ("succeeded", "failed"):  # both series exist from the start, at 0
    BUILDS.labels(_result)
    BUILD_TIME.labels(_result)
for _kind in ("trial", "sweep", "task", "imagebuild"):
    RECONCILE_ERRORS.labels(_kind)

STATE = _State()
REGISTRY.register(STATE)
WARM_PODS = Gauge("shipyard_warm_pods", "Warm pods by state (no warm pool yet: always 0).",
                  ["state"])
for _state in ("ready", "claimed"):
    WARM_PODS.labels(_state).set(0)


@contextmanager
def reconciling(kind: str) -> Iterator[None]:
    """Count and time one reconcile pass of `kind` (trial, sweep, task, imagebuild)."""
    began = time.perf_counter()
    try:
        yield
    except Exception:
        RECONCILES.labels(kind, "error").inc()
        RECONCILE_ERRORS.labels(kind).inc()
        raise
    else:
        RECONCILES.labels(kind, "success").inc()
    finally:
        RECONCILE_TIME.labels(kind).observe(time.perf_counter() - began)


def trial_seen(namespace: str, name: str, trial: dict[str, Any]) -> None:
    """A Trial event: its phase counted; a Trial seen to finish (not one found finished when
    the operator starts) observed once."""
    phase = trial_phase_label((trial.get("status") or {}).get("phase"))
    before = STATE.trials.get((namespace, name))
    STATE.trials[(namespace, name)] = phase
    if before is None or is_finished_phase(before) or not is_finished_phase(phase):
        return
    times = finished_trial(trial)
    if times is None:
        return
    OUTCOMES.labels(times.outcome).inc()
    for label, seconds in times.phases:
        PHASE_TIME.labels(label).observe(seconds)
    if times.to_running is not None:
        TO_RUNNING.observe(times.to_running)
    if times.to_reward is not None:
        TO_REWARD.observe(times.to_reward)


def trial_gone(namespace: str, name: str) -> None:
    STATE.trials.pop((namespace, name), None)


def sweep_queued(namespace: str, name: str, queued: int | None) -> None:
    STATE.sweep_namespaces.add(namespace)
    if queued is None:
        STATE.queued.pop((namespace, name), None)
    else:
        STATE.queued[(namespace, name)] = queued


def build_finished(phase: str, seconds: float | None) -> None:
    result = "succeeded" if phase == "Succeeded" else "failed"
    BUILDS.labels(result).inc()
    if seconds is not None:
        BUILD_TIME.labels(result).observe(seconds)


def serve(port: int | None, address: str = "") -> int | None:
    """Serve `/metrics` on `port` (0: a free one); returns the port, None when off or when the
    port is taken (logged: the operator runs on without metrics rather than not at all)."""
    if port is None or port < 0:
        return None
    try:
        server, _ = start_http_server(port, addr=address or "0.0.0.0")
    except OSError as exc:
        log.warning(f"metrics: cannot listen on port {port} ({exc}); /metrics is off")
        return None
    bound = int(server.server_address[1])
    log.info(f"metrics: serving /metrics on port {bound}")
    return bound
