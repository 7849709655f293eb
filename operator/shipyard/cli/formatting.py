"""Pure formatting for the CLI: ages, table rows, phase lines and the watch display.

Everything here takes plain dicts (Tasks and Trials as the API returns them) and a `now`, and
returns strings or rich renderables, so it is unit-tested without a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from shipyard.api import conventions
from shipyard.api.conventions import object_conditions, parse_time
from shipyard.api.reasons import WAITING

STATE_STYLE = {
    "Pending": "dim",
    "Queued": "magenta",
    "Running": "yellow",
    "Succeeded": "green",
    "Failed": "red",
    "Skipped": "dim",
    "Completed": "green",
}


def age(value: str | None, now: datetime) -> str:
    """kubectl-style: 42s, 5m, 3h, 2d."""
    then = parse_time(value)
    if then is None:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def duration(start: str | None, end: str | None, now: datetime) -> str:
    """`1.2s` / `3m04s`; running phases count up to now."""
    began = parse_time(start)
    if began is None:
        return ""
    finished = parse_time(end) or now
    seconds = max(0.0, (finished - began).total_seconds())
    if seconds < 1:
        return "<1s"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds == int(seconds) else f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def number(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}"


def waiting_note(status: dict[str, Any]) -> str | None:
    """Why an unfinished trial is not running a phase now: it waits for its Task, or for a
    retry's backoff (the Running condition's message); None otherwise."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Running" and cond.get("reason") in WAITING:
            return cond.get("message") or cond["reason"]
    return None


def condition(obj: dict[str, Any], *types: str) -> dict[str, Any] | None:
    """The object's first true condition of one of `types`."""
    return conventions.condition(object_conditions(obj), *types)


def trial_reason(trial: dict[str, Any]) -> str:
    """Why a trial failed ("" unless it did)."""
    cond = condition(trial, "Failed")
    return cond.get("reason", "") if cond else ""


def trial_row(trial: dict[str, Any], now: datetime, namespace: bool = False) -> list[str]:
    meta, spec = trial["metadata"], trial.get("spec") or {}
    status = trial.get("status") or {}
    row = [
        meta["name"],
        (spec.get("taskRef") or {}).get("name", ""),
        (spec.get("agent") or {}).get("name", "oracle"),
        status.get("phase", "Pending"),
        number(status.get("reward")),
        trial_reason(trial) or status.get("currentPhase") or "",
        age(meta.get("creationTimestamp"), now),
    ]
    return [meta.get("namespace", ""), *row] if namespace else row


TRIAL_COLUMNS = ["NAME", "TASK", "AGENT", "PHASE", "REWARD", "REASON", "AGE"]
TASK_COLUMNS = ["NAME", "READY", "STEPS", "VERIFIER", "IMAGE", "NETWORK", "DIGEST", "AGE"]


def task_row(task: dict[str, Any], now: datetime, namespace: bool = False) -> list[str]:
    meta, status = task["metadata"], task.get("status") or {}
    summary = status.get("summary") or {}
    ready = conventions.condition(status.get("conditions"), "Ready", status=None)
    ready_text = "-" if ready is None else ("True" if ready["status"] == "True"
                                            else f"False ({ready.get('reason', '')})")
    digest = (status.get("digest") or "").removeprefix("sha256:")[:12] or "-"
    row = [
        meta["name"],
        ready_text,
        str(summary.get("steps", "-")),
        summary.get("verifierMode", "-"),
        summary.get("image") or "-",
        summary.get("network", "-"),
        digest,
        age(meta.get("creationTimestamp"), now),
    ]
    return [meta.get("namespace", ""), *row] if namespace else row


def table(columns: list[str], rows: Iterable[list[str]]) -> str:
    """kubectl's plain table: left-aligned columns three spaces apart, never truncated."""
    body = [list(columns), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in body) for i in range(len(columns))]
    lines = []
    for row in body:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


# ---------------------------------------------------------------- following a trial


def phase_label(record: dict[str, Any]) -> str:
    step = record.get("step")
    return f"{step}/{record['name']}" if step else record["name"]


def phase_event(record: dict[str, Any], now: datetime) -> str:
    """One line for a phase that changed state (non-interactive output)."""
    parts = [f"{phase_label(record)}: {record.get('state', 'Pending')}"]
    details = []
    if record.get("state") in ("Succeeded", "Failed") and record.get("startedAt"):
        details.append(duration(record.get("startedAt"), record.get("finishedAt"), now))
    if record.get("exitCode") is not None:
        details.append(f"exit {record['exitCode']}")
    if record.get("timedOut"):
        details.append("timed out")
    if record.get("message"):
        details.append(record["message"])
    if details:
        parts.append(f"({', '.join(details)})")
    return " ".join(parts)


def phase_states(trial: dict[str, Any]) -> dict[str, str]:
    """`id or label` → state, to notice what changed between two versions of a trial."""
    return {
        record.get("id") or phase_label(record): record.get("state", "Pending")
        for record in (trial.get("status") or {}).get("phases") or []
    }


def outcome_line(trial: dict[str, Any]) -> str:
    """The last line of `shipyard run --watch`."""
    name = trial["metadata"]["name"]
    status = trial.get("status") or {}
    cond = condition(trial, "Complete", "Failed")
    if status.get("phase") == "Completed" or (cond and cond["type"] == "Complete"):
        rewards = status.get("rewards") or {}
        extra = "" if set(rewards) <= {"reward"} else f" {json.dumps(rewards, sort_keys=True)}"
        return f"trial {name} Completed: reward {number(status.get('reward'))}{extra}"
    if cond:
        return f"trial {name} Failed: {cond.get('reason', '')}: {cond.get('message', '')}"
    return f"trial {name} {status.get('phase', 'Pending')}"


class TrialView:
    """The live display of one trial: a header and a table of its phases, recomputed at each
    refresh so that the running phase's duration counts up."""

    def __init__(self) -> None:
        self.trial: dict[str, Any] | None = None
        self.clock = lambda: datetime.now(UTC)

    def update(self, trial: dict[str, Any]) -> None:
        self.trial = trial

    def __rich__(self) -> Group:
        now = self.clock()
        if self.trial is None:
            return Group(Text("waiting for the trial...", style="dim"))
        trial = self.trial
        status = trial.get("status") or {}
        spec = trial.get("spec") or {}
        phase = status.get("phase", "Pending")
        header = Text.assemble(
            ("trial ", "bold"), (trial["metadata"]["name"], "bold cyan"),
            f"  task {(spec.get('taskRef') or {}).get('name', '')}",
            f"  agent {(spec.get('agent') or {}).get('name', 'oracle')}  ",
            (phase, STATE_STYLE.get(phase, "")),
            f"  {duration(status.get('startedAt'), status.get('finishedAt'), now)}",
        )
        phases = Table(box=None, padding=(0, 2, 0, 2), show_header=True, show_edge=False)
        for column in ("PHASE", "STATE", "TIME", "EXIT", ""):
            phases.add_column(column, style="dim" if column == "" else "")
        for record in status.get("phases") or []:
            state = record.get("state", "Pending")
            exit_code = record.get("exitCode")
            note = "timed out" if record.get("timedOut") else (record.get("message") or "")
            phases.add_row(
                Text(phase_label(record)),
                Text(state, style=STATE_STYLE.get(state, "")),
                Text(duration(record.get("startedAt"), record.get("finishedAt"), now)),
                Text("" if exit_code is None else str(exit_code)),
                Text(note[:80]),
            )
        parts: list[Any] = [header, phases]
        note = waiting_note(status)
        if note:
            parts.append(Text(f"  {note}", style="yellow"))
        elif not status.get("phases"):
            parts.append(Text("  waiting for the operator to start the trial...", style="dim"))
        return Group(*parts)
