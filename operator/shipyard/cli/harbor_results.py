"""Trials in the shape of Harbor's results (docs/harbor.md §b.7 TrialResult, §e.3
JobResult/JobStats, §e.4 metrics), so that tooling written for Harbor's `result.json` files can
read them.

Pure: Trial (and Task) dicts as the API returns them in, plain JSON-able dicts out. What
Shipyard does not know is null (token counts, costs, tracebacks, model info), never made up.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from shipyard.api.compat import known_fields
from shipyard.api.conventions import (
    ANNOTATION_DATASET,
    LABEL_SWEEP,
    is_finished_phase,
    iso,
    owner_references,
)
from shipyard.api.reasons import HarborError
from shipyard.api.sweep import SweepSpec
from shipyard.cli.formatting import parse_time
from shipyard.plan.phases import FOLDER_FILE_INFIX, VERIFIER_REPORTS
from shipyard.plan.sweep import dataset_name, expand, trial_body
from shipyard.reconcile.harbor_outcome import (
    agent_timeout,
    exception_info,
    exception_record,
    exception_type,
)
from shipyard.reconcile.sweep_results import Outcome, Tokens, eval_results, token_totals
from shipyard.reconcile.sweep_status import (
    Ledger,
    SlotView,
    TaskState,
    is_settled,
    observe,
    resolve_tasks,
    slot_views,
)

VERIFIER_REPORT_NAMES = tuple(p.rsplit("/", 1)[-1] for p in VERIFIER_REPORTS)
DATASET = "adhoc"  # Harbor's name for trials that belong to no dataset


def _timing(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not record or not record.get("startedAt"):
        return None
    return {"started_at": record.get("startedAt"), "finished_at": record.get("finishedAt")}


def _phase(records: list[dict[str, Any]], name: str, step: str | None = None
           ) -> dict[str, Any] | None:
    """The last record of a phase kind (the last attempt wins)."""
    found = [r for r in records if r.get("name") == name and r.get("step") == step]
    return found[-1] if found else None


def trial_config(trial: Mapping[str, Any]) -> dict[str, Any]:
    """Harbor's TrialConfig, with only the fields that differ from its defaults."""
    meta, spec = trial["metadata"], trial.get("spec") or {}
    agent_spec = spec.get("agent") or {}
    agent: dict[str, Any] = {"name": agent_spec.get("name", "oracle")}
    if agent_spec.get("overrideTimeoutSec") is not None:
        agent["override_timeout_sec"] = agent_spec["overrideTimeoutSec"]
    if agent_spec.get("maxTimeoutSec") is not None:
        agent["max_timeout_sec"] = agent_spec["maxTimeoutSec"]
    if agent_spec.get("env"):
        agent["env"] = {e["name"]: e.get("value", "") for e in agent_spec["env"]}
    if agent_spec.get("command"):
        agent["kwargs"] = {"command": agent_spec["command"]}
    if agent_spec.get("kwargs"):
        agent["kwargs"] = dict(agent_spec["kwargs"])
    for ours, theirs in (("model", "model_name"), ("version", "version")):
        if agent_spec.get(ours):
            agent[theirs] = agent_spec[ours]
    task = (spec.get("taskRef") or {}).get("name", "")
    config: dict[str, Any] = {
        "task": {"path": f"{meta.get('namespace', '')}/{task}"},
        "trial_name": meta["name"],
        "agent": agent,
    }
    for ours, theirs in (
        ("timeoutMultiplier", "timeout_multiplier"),
        ("agentTimeoutMultiplier", "agent_timeout_multiplier"),
        ("verifierTimeoutMultiplier", "verifier_timeout_multiplier"),
    ):
        if spec.get(ours) not in (None, 1.0):
            config[theirs] = spec[ours]
    environment = spec.get("environment") or {}
    env_config = {
        theirs: environment[ours]
        for ours, theirs in (
            ("overrideCpus", "override_cpus"),
            ("overrideMemoryMb", "override_memory_mb"),
            ("overrideStorageMb", "override_storage_mb"),
        )
        if environment.get(ours) is not None
    }
    if env_config:
        config["environment"] = env_config
    return config


def _step_results(trial: Mapping[str, Any]) -> list[dict[str, Any]]:
    status = trial.get("status") or {}
    records = status.get("phases") or []
    results = []
    for step in status.get("steps") or []:
        name = step["name"]
        error = step.get("error")
        timed_out = agent_timeout(r for r in records if r.get("step") == name)
        info = None
        if timed_out is not None:
            info = exception_record(HarborError.AGENT_TIMEOUT,
                                    timed_out.get("message") or "Agent execution timed out",
                                    timed_out.get("finishedAt"), trial)
        elif error:
            info = exception_record(exception_type(error.get("type", "")),
                                    error.get("message", ""), None, trial)
        results.append({
            "step_name": name,
            "agent_result": None,
            "verifier_result": (
                {"rewards": step["rewards"]} if step.get("rewards") is not None else None
            ),
            "exception_info": info,
            "agent_execution": _timing(_phase(records, "agent", name)),
            "verifier": _timing(_phase(records, "verifier", name)),
        })
    return results


def agent_info(agent: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """Harbor's AgentInfo: name, version and the model (`provider/name` split as Harbor)."""
    model = (status.get("agentResult") or {}).get("model") or agent.get("model")
    model_info = None
    if model:
        provider, _, name = model.rpartition("/")
        model_info = {"name": name, "provider": provider or None}
    return {"name": agent.get("name", "oracle"), "version": agent.get("version") or "unknown",
            "model_info": model_info}


def agent_context(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Harbor's AgentContext from `status.agentResult`."""
    if not result:
        return None
    return {
        "n_input_tokens": result.get("inputTokens"),
        "n_cache_tokens": result.get("cacheTokens"),
        "n_output_tokens": result.get("outputTokens"),
        "cost_usd": result.get("costUsd"),
        "metadata": {"turns": result.get("turns")} if result.get("turns") is not None else None,
    }


def trial_result(trial: Mapping[str, Any], task: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """One Harbor TrialResult (`result.json`)."""
    meta, spec = trial["metadata"], trial.get("spec") or {}
    status = trial.get("status") or {}
    records = status.get("phases") or []
    task_name = (spec.get("taskRef") or {}).get("name", "")
    summary = ((task or {}).get("status") or {}).get("summary") or {}
    multi_step = bool(status.get("steps")) or summary.get("steps", 1) > 1
    digest = status.get("taskDigest") or ((task or {}).get("status") or {}).get("digest")
    rewards = status.get("rewards")
    return {
        "id": meta.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_URL, meta["name"])),
        "task_name": task_name,
        "trial_name": meta["name"],
        "trial_uri": f"k8s://{meta.get('namespace', '')}/trials.shipyard.dev/{meta['name']}",
        "task_id": {"path": f"{meta.get('namespace', '')}/{task_name}"},
        "source": (meta.get("annotations") or {}).get(ANNOTATION_DATASET)
        or (meta.get("labels") or {}).get(LABEL_SWEEP),
        # required by Harbor's TrialResult: empty when no Task content was ever seen
        "task_checksum": digest.removeprefix("sha256:") if digest else "",
        "config": trial_config(trial),
        "agent_info": agent_info(spec.get("agent") or {}, status),
        "agent_result": agent_context(status.get("agentResult")),
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "verifier_environment_mode": None if multi_step else summary.get("verifierMode"),
        "exception_info": exception_info(trial),
        "started_at": status.get("startedAt"),
        "finished_at": status.get("finishedAt"),
        "environment_setup": _timing(_phase(records, "environment")),
        "agent_setup": _timing(_phase(records, "setup")),
        "agent_execution": None if multi_step else _timing(_phase(records, "agent")),
        "verifier": None if multi_step else _timing(_phase(records, "verifier")),
        "step_results": _step_results(trial) if multi_step else [],
    }


# ---------------------------------------------------------------- job level (docs/harbor.md §e.3,
# §e.4)


def eval_key(result: Mapping[str, Any]) -> str:
    agent = result["agent_info"]
    model = (agent.get("model_info") or {}).get("name")
    dataset = result.get("source") or DATASET
    return f"{agent['name']}__{model}__{dataset}" if model else f"{agent['name']}__{dataset}"


def trial_tokens(result: Mapping[str, Any]) -> Tokens:
    """Harbor's `TrialResult.compute_token_cost_totals` for our results (one AgentContext)."""
    context = result.get("agent_result") or {}
    return (context.get("n_input_tokens"), context.get("n_cache_tokens"),
            context.get("n_output_tokens"), context.get("cost_usd"))


def outcome(result: Mapping[str, Any]) -> Outcome:
    """A finished TrialResult as Harbor's job statistics count it."""
    return Outcome(eval_key(result), result["task_name"], result["trial_name"],
                   (result.get("verifier_result") or {}).get("rewards"),
                   (result.get("exception_info") or {}).get("exception_type"),
                   trial_tokens(result))


def job_stats(outcomes: list[Outcome], *, running: int, pending: int, retries: int,
              metrics: Sequence[str] = ("mean",)) -> dict[str, Any]:
    """Harbor's JobStats over the finished trials' outcomes, in their order."""
    totals = token_totals(outcomes)
    return {
        "n_completed_trials": len(outcomes),
        "n_errored_trials": sum(1 for o in outcomes if o.exception is not None),
        "n_running_trials": running,
        "n_pending_trials": pending,
        "n_cancelled_trials": sum(1 for o in outcomes if o.exception == HarborError.CANCELLED),
        "n_retries": retries,
        "n_input_tokens": totals[0],
        "n_cache_tokens": totals[1],
        "n_output_tokens": totals[2],
        "cost_usd": totals[3],
        "evals": {key: stats.harbor() for key, stats in eval_results(outcomes, metrics).items()},
    }


def job_result(trials: list[Mapping[str, Any]], tasks: Mapping[str, Mapping[str, Any]],
               now: datetime, job_id: str | None = None) -> dict[str, Any]:
    """Harbor's JobResult over these trials, in their order; `tasks` maps "namespace/name" →
    Task."""
    results = [trial_result(t, task_of(t, tasks)) for t in trials]
    phases = [(t.get("status") or {}).get("phase", "Pending") for t in trials]
    finished = [r for r, p in zip(results, phases, strict=True) if is_finished_phase(p)]
    stats = job_stats([outcome(r) for r in finished],
                      running=phases.count("Running"),
                      pending=phases.count("Pending") + phases.count("Queued"),
                      retries=sum(len((t.get("status") or {}).get("attempts") or [])
                                  for t in trials))
    job = job_document(results, stats, now, job_id)
    # required by Harbor's JobResult: when no trial started yet, when the first was created
    created = [t["metadata"].get("creationTimestamp") for t in trials]
    job["started_at"] = job["started_at"] or min((c for c in created if c), default=iso(now))
    return job


def task_of(trial: Mapping[str, Any], tasks: Mapping[str, Mapping[str, Any]]
            ) -> Mapping[str, Any] | None:
    return tasks.get(f"{trial['metadata'].get('namespace', '')}/"
                     f"{(trial.get('spec') or {}).get('taskRef', {}).get('name', '')}")


def job_document(results: list[dict[str, Any]], stats: dict[str, Any], now: datetime,
                 job_id: str | None = None) -> dict[str, Any]:
    """Harbor's JobResult around trial results and their stats."""
    started = [r["started_at"] for r in results if r["started_at"]]
    finished = [r["finished_at"] for r in results if r["finished_at"]]
    all_done = bool(results) and len(finished) == len(results)
    return {
        "id": job_id or str(uuid.uuid5(uuid.NAMESPACE_URL, ",".join(
            sorted(r["id"] for r in results)))),
        "started_at": min(started) if started else None,
        "updated_at": iso(now),
        "finished_at": max(finished) if all_done else None,
        "n_total_trials": len(results),
        "stats": stats,
        "trial_results": results,
    }


# ---------------------------------------------------------------- Harbor's job directory


def harbor_log_path(key: str, agent: str) -> str | None:
    """Where a logs ConfigMap key goes in Harbor's trial directory (None: nowhere)."""
    names = {"agent.log": f"agent/{agent}.txt", "agent.trajectory.json": "agent/trajectory.json",
             "verifier.log": "verifier/test-stdout.txt",
             **{f"verifier.{n}": f"verifier/{n}" for n in VERIFIER_REPORT_NAMES}}
    # Another file of the verifier's folder first: its name is anyone's (an agent can leave
    # `x.agent.trajectory.json` there), and must not read as another key's suffix.
    folder = "verifier" + FOLDER_FILE_INFIX
    if key.startswith(folder):
        return f"verifier/{key.removeprefix(folder)}" if key != folder else None
    step, found, name = key.partition("." + folder)
    if found and step and name:
        return f"steps/{step}/verifier/{name}"
    for suffix, path in names.items():
        if key == suffix:
            return path
        if key.endswith("." + suffix):
            return f"steps/{key.removesuffix('.' + suffix)}/{path}"
    return None


def _reward_file(rewards: Mapping[str, Any]) -> tuple[str, str]:
    if set(rewards) == {"reward"}:
        return "reward.txt", f"{rewards['reward']:g}\n"
    return "reward.json", json.dumps(rewards) + "\n"


def trial_files(result: Mapping[str, Any], logs: Mapping[str, str] | None) -> dict[str, str]:
    """A trial directory as Harbor lays it out, relative path → text: result.json, the
    rewards under verifier/ (per step under steps/<step>/) and, from the trial's logs
    ConfigMap, `agent/<agent>.txt`, `agent/trajectory.json`, `verifier/test-stdout.txt` and,
    when the test script wrote them, `verifier/test-stderr.txt`, `verifier/ctrf.json` and the
    other files it left in /logs/verifier."""
    files = {"result.json": json.dumps(result, indent=2) + "\n"}
    if result.get("config"):  # Harbor's TrialConfig: the viewer's trial config page
        files["config.json"] = json.dumps(result["config"], indent=2) + "\n"
    rewards = (result.get("verifier_result") or {}).get("rewards")
    if rewards is not None:
        name, text = _reward_file(rewards)
        files[f"verifier/{name}"] = text
    for step in result.get("step_results") or []:
        step_rewards = (step.get("verifier_result") or {}).get("rewards")
        if step_rewards is not None:
            name, text = _reward_file(step_rewards)
            files[f"steps/{step['step_name']}/verifier/{name}"] = text
    agent = (result.get("agent_info") or {}).get("name", "agent")
    for key, text in (logs or {}).items():
        path = harbor_log_path(key, agent)
        if path is not None:
            files[path] = text
    return files


# ---------------------------------------------------------------- a Sweep's job


def _owned(trial: Mapping[str, Any], uid: str | None) -> bool:
    return any(o.get("uid") == uid for o in owner_references(trial, "Sweep"))


def sweep_views(sweep: Mapping[str, Any], trials: list[Mapping[str, Any]],
                tasks: list[Mapping[str, Any]], now: datetime
                ) -> tuple[SweepSpec, list[TaskState], list[SlotView], int]:
    """The Sweep's plan slots with their current Trials, as its status computes them (a
    complete Sweep's missing Tasks are past their wait), and the Trials a retry superseded."""
    meta = sweep["metadata"]
    spec = SweepSpec.model_validate(known_fields(SweepSpec, dict(sweep.get("spec") or {})))
    created = parse_time(meta.get("creationTimestamp")) or now
    waited = math.inf if is_settled(meta, sweep.get("status")) else \
        (now - created).total_seconds()
    states = resolve_tasks(spec, tasks, waited)
    slots = expand([t.name for t in states], spec)
    observed = [o for t in trials if _owned(t, meta.get("uid"))
                and (o := observe(t)) is not None]
    ledger = Ledger.of(observed)
    superseded = sum(len(ts) - 1 for ts in ledger.slots.values())
    return spec, states, slot_views(meta["name"], spec, states, slots, ledger), superseded


def unrunnable_trial(sweep: Mapping[str, Any], spec: SweepSpec, view: SlotView,
                     message: str) -> dict[str, Any]:
    """The Trial a slot of a missing or invalid Task would have run, failed with that error,
    so that its TrialResult counts the error wherever the job is read (Harbor's viewer too)."""
    assert view.outcome is not None
    body = trial_body(sweep, spec, view.slot)
    at = (sweep.get("status") or {}).get("startTime") or sweep["metadata"].get(
        "creationTimestamp")
    body["metadata"]["creationTimestamp"] = at
    body["status"] = {"phase": "Failed", "startedAt": at, "finishedAt": at,
                      "error": {"type": view.outcome.exception, "message": message}}
    return body


def sweep_job(sweep: Mapping[str, Any], trials: list[Mapping[str, Any]],
              tasks: list[Mapping[str, Any]], now: datetime
              ) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A Sweep's Harbor JobResult over its plan slots in plan order: the current Trial of each
    slot, and a failed TrialResult for each slot whose Task cannot run; the stats are the
    status's (`sweep_results`), computed the same way from the same slots. Returns the job,
    the Trials (real ones, for their logs) and Harbor's JobConfig of the Sweep."""
    spec, states, views, superseded = sweep_views(sweep, trials, tasks, now)
    by_task = {f"{t['metadata'].get('namespace', '')}/{t['metadata']['name']}": t
               for t in tasks}
    by_name = {t["metadata"]["name"]: t for t in trials}
    messages = {s.name: s.message for s in states}
    results, real = [], []
    for view in views:
        if view.current is not None:
            trial = by_name[view.current.name]
            real.append(trial)
        elif view.outcome is not None:
            trial = unrunnable_trial(sweep, spec, view, messages.get(view.slot.task, ""))
        else:
            continue
        results.append(trial_result(trial, task_of(trial, by_task)))
    outcomes = [v.outcome for v in views if v.outcome is not None]
    running = sum(1 for v in views if v.current is not None and v.current.phase == "Running")
    stats = job_stats(outcomes, running=running,
                      pending=max(len(views) - len(outcomes) - running, 0), retries=superseded,
                      metrics=[m.type for m in spec.metrics])
    status = sweep.get("status") or {}
    job = job_document(results, stats, now, job_id=sweep["metadata"].get("uid"))
    job["n_total_trials"] = len(views)
    job["started_at"] = job["started_at"] or status.get("startTime") or \
        sweep["metadata"].get("creationTimestamp")
    job["finished_at"] = status.get("completionTime")
    return job, real, job_config(sweep, spec, [s.name for s in states], ".")


def job_config(sweep: Mapping[str, Any], spec: SweepSpec, tasks: Sequence[str],
               jobs_dir: str) -> dict[str, Any]:
    """Harbor's JobConfig (the job's `config.json`) of a Sweep: its agents with their models,
    its dataset and tasks, the attempts and parallelism, the environment overrides. Harbor's
    viewer lists a job's agents, models and datasets from it."""
    name = sweep["metadata"]["name"]
    template = spec.trial_template.model_dump(by_alias=True, exclude_none=True, mode="json")
    agents = []
    for agent in spec.agents:
        entry: dict[str, Any] = {"name": agent.name}
        if agent.model:
            entry["model_name"] = agent.model
        if agent.parallelism is not None:
            entry["n_concurrent"] = agent.parallelism
        agents.append(entry)
    # Not one of Harbor's environment types (Harbor would default to docker): the Kubernetes
    # operator that ran the trials, named as a custom environment is.
    environment: dict[str, Any] = {"import_path": "shipyard.operator:Trial", "kwargs": {
        "runner": "shipyard", "namespace": sweep["metadata"].get("namespace", ""),
        "sweep": name}}
    env = template.get("environment") or {}
    for ours, theirs in (("overrideCpus", "override_cpus"),
                         ("overrideMemoryMb", "override_memory_mb"),
                         ("overrideStorageMb", "override_storage_mb")):
        if env.get(ours) is not None:
            environment[theirs] = env[ours]
    config: dict[str, Any] = {
        "job_name": name,
        "jobs_dir": jobs_dir,
        "n_attempts": spec.attempts,
        "n_concurrent_trials": spec.parallelism,
        "environment": environment,
        "metrics": [{"type": m.type} for m in spec.metrics],
        "agents": agents,
        "datasets": [{"name": dataset_name(name, spec), "task_names": list(tasks)}],
    }
    if template.get("timeoutMultiplier") not in (None, 1.0):
        config["timeout_multiplier"] = template["timeoutMultiplier"]
    return config
