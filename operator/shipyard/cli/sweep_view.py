"""Pure pieces of `shipyard sweep`: the Sweep manifest, the live progress view and table rows.
Plain dicts in; strings, dicts or rich renderables out (unit-tested without a cluster)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from shipyard.api.conventions import MANAGED_BY
from shipyard.api.models import API_VERSION
from shipyard.cli.formatting import age, condition, number, parse_time

SWEEP_COLUMNS = ["NAME", "PROGRESS", "RUNNING", "ERRORS", "MEAN", "COST", "STATE", "AGE"]


def sweep_body(tasks: Sequence[str], agents: Sequence[Mapping[str, Any]], *, name: str | None,
               prefix: str, attempts: int, parallelism: int,
               per_task_parallelism: int | None, dataset: str | None,
               template: Mapping[str, Any]) -> dict[str, Any]:
    """The Sweep `shipyard sweep run` creates."""
    spec: dict[str, Any] = {"tasks": {"names": list(tasks)}, "agents": [dict(a) for a in agents],
                            "attempts": attempts, "parallelism": parallelism}
    if per_task_parallelism is not None:
        spec["perTaskParallelism"] = per_task_parallelism
    if dataset:
        spec["dataset"] = dataset
    if template:
        spec["trialTemplate"] = dict(template)
    metadata: dict[str, Any] = {"labels": dict(MANAGED_BY)}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{prefix[:30].rstrip('-')}-"
    return {"apiVersion": API_VERSION, "kind": "Sweep", "metadata": metadata, "spec": spec}


def state(sweep: Mapping[str, Any]) -> str:
    for kind in ("Failed", "Complete", "Suspended"):
        c = condition(dict(sweep), kind)
        if c is not None and c.get("status") == "True":
            return {"Complete": "Complete", "Failed": f"Failed ({c.get('reason')})",
                    "Suspended": "Suspended"}[kind]
    return "Running" if (sweep.get("status") or {}).get("counts", {}).get("created") else \
        "Pending"


def finished(sweep: Mapping[str, Any]) -> bool:
    return state(sweep).split(" ")[0] in ("Complete", "Failed")


def sweep_row(sweep: Mapping[str, Any], now: datetime, namespace: bool = False) -> list[str]:
    status = sweep.get("status") or {}
    counts = status.get("counts") or {}
    row = [sweep["metadata"]["name"], status.get("progress") or "-",
           str(counts.get("running", 0)), str(counts.get("errored", 0)),
           number(status.get("mean")), dollars(status.get("costUsd")), state(sweep),
           age(sweep["metadata"].get("creationTimestamp"), now)]
    return ([sweep["metadata"].get("namespace", "")] if namespace else []) + row


def eta(sweep: Mapping[str, Any], now: datetime) -> str:
    """Time left at the rate so far (finished slots per second since the first Trial)."""
    status = sweep.get("status") or {}
    counts = status.get("counts") or {}
    done, planned = counts.get("completed", 0), counts.get("planned", 0)
    started = parse_time(status.get("startTime"))
    if finished(sweep):
        end = parse_time(status.get("completionTime")) or now
        return f"took {_clock((end - started).total_seconds())}" if started else ""
    if not started or not done:
        return "ETA -"
    rate = done / max(1.0, (now - started).total_seconds())
    return f"ETA {_clock((planned - done) / rate)}"


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"


def _metric(stats: Mapping[str, Any]) -> str:
    metrics = stats.get("metrics") or []
    if not metrics:
        return "-"
    return ", ".join(f"{k} {v:.3g}" for k, v in metrics[0].items())


def _passes(stats: Mapping[str, Any]) -> str:
    return " ".join(f"@{k} {v:.2f}" for k, v in (stats.get("passAtK") or {}).items()) or "-"


def dollars(usd: float | None) -> str:
    """A summed cost, `$0.0123`; `-` when no Trial reported one."""
    return "-" if usd is None else f"${usd:.4g}"


def usage(inputs: int | None, cache: int | None, outputs: int | None, cost: float | None
          ) -> str:
    """Summed agent tokens and cost, `tokens in 1200 cache 300 out 80, cost $0.0123`; "" when
    no Trial reported any (oracle, nop, command agents)."""
    if inputs is None and cache is None and outputs is None and cost is None:
        return ""
    return (f"tokens in {number(inputs)} cache {number(cache)} out {number(outputs)}, "
            f"cost {dollars(cost)}")


def eval_usage(stats: Mapping[str, Any]) -> str:
    """`usage` of one eval key of a Sweep's status."""
    return usage(stats.get("nInputTokens"), stats.get("nCacheTokens"),
                 stats.get("nOutputTokens"), stats.get("costUsd"))


def sweep_view(sweep: Mapping[str, Any], now: datetime) -> Group:
    """The live view: a bar per eval key with its done/errors/mean/pass@k (and the agents'
    tokens and cost when they report any), the counts, ETA."""
    status = sweep.get("status") or {}
    counts = status.get("counts") or {}
    header = Text.assemble(
        (f"sweep {sweep['metadata']['name']}", "bold"), "  ",
        (state(sweep), "green" if state(sweep) == "Complete" else "yellow"), "  ",
        f"{status.get('progress') or '0/?'} done · {counts.get('running', 0)} running · "
        f"{counts.get('pending', 0)} pending"
        + (f" ({counts['queued']} queued in Kueue)" if counts.get("queued") else "")
        + f" · {counts.get('errored', 0)} errors · "
        f"{counts.get('retried', 0)} retried · mean {number(status.get('mean')) or '-'} · "
        f"{eta(sweep, now)}")
    table = Table(box=None, pad_edge=False, show_edge=False)
    evals = status.get("evals") or []
    with_usage = any(eval_usage(e) for e in evals)
    for column in ("EVAL", "", "DONE", "ERRORS", "METRIC", "PASS@K") + (
            ("TOKENS IN/CACHE/OUT", "COST") if with_usage else ()):
        table.add_column(column)
    for stats in evals:
        planned = max(1, stats.get("planned", 0))
        table.add_row(stats["key"], ProgressBar(total=planned, completed=stats.get("finished", 0),
                                                width=30),
                      f"{stats.get('finished', 0)}/{stats.get('planned', 0)}",
                      str(stats.get("nErrors", 0)), _metric(stats), _passes(stats),
                      *((f"{number(stats.get('nInputTokens'))}/"
                         f"{number(stats.get('nCacheTokens'))}/"
                         f"{number(stats.get('nOutputTokens'))}",
                         dollars(stats.get("costUsd"))) if with_usage else ()))
    notes = [Text(f"{c['type']}: {c.get('message', '')}", style="red")
             for c in status.get("conditions") or []
             if (c.get("status") == "False" and c.get("type") == "TasksReady")
             or c.get("type") == "Failed"]
    return Group(header, table, *notes)


def progress_line(sweep: Mapping[str, Any], now: datetime) -> str:
    """The same, on one line, for a log or a pipe."""
    status = sweep.get("status") or {}
    counts = status.get("counts") or {}
    evals = "; ".join(f"{e['key']} {e.get('finished', 0)}/{e.get('planned', 0)} "
                      f"{_metric(e)} pass{_passes(e)}"
                      + (f" {eval_usage(e)}" if eval_usage(e) else "")
                      for e in status.get("evals") or [])
    return (f"sweep {sweep['metadata']['name']}: {status.get('progress') or '0/?'} done, "
            f"{counts.get('running', 0)} running, {counts.get('errored', 0)} errors, mean "
            f"{number(status.get('mean')) or '-'}, {eta(sweep, now)}" + (f" | {evals}"
                                                                          if evals else ""))
