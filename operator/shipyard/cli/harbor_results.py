"""Trials in the shape of Harbor's results (docs/harbor.md §b.7 TrialResult, §e.3
JobResult/JobStats, §e.4 metrics), so that tooling written for Harbor's `result.json` files can
read them.

Pure: Trial (and Task) dicts as the API returns them in, plain JSON-able dicts out. What
Shipyard does not know is null (token counts, costs, tracebacks, model info), never made up.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from shipyard.api.conventions import ANNOTATION_DATASET, LABEL_SWEEP, is_finished_phase, iso
from shipyard.api.reasons import HarborError
from shipyard.reconcile.harbor_outcome import (
    agent_timeout,
    exception_info,
    exception_record,
    exception_type,
)
from shipyard.taskformat import aggregate_mean
from shipyard.taskformat import pass_at_k as harbor_pass_at_k

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


def _usage_totals(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Summed tokens and cost (None when no trial reported any)."""
    totals: dict[str, Any] = {}
    for key in ("n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd"):
        values = [(r.get("agent_result") or {}).get(key) for r in results]
        values = [v for v in values if v is not None]
        totals[key] = sum(values) if values else None
    return totals


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
        "task_checksum": digest.removeprefix("sha256:") if digest else None,
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


def pass_at_k(results: list[Mapping[str, Any]]) -> dict[str, float]:
    """Harbor's pass@k over TrialResults of one eval key (JSON keys are strings)."""
    by_task: dict[str, list[Mapping[str, float] | None]] = defaultdict(list)
    for result in results:
        by_task[result["task_name"]].append((result.get("verifier_result") or {}).get("rewards"))
    return {str(k): v for k, v in harbor_pass_at_k(by_task).items()}


def job_stats(results: list[Mapping[str, Any]], trials: list[Mapping[str, Any]]
              ) -> dict[str, Any]:
    phases = [(t.get("status") or {}).get("phase", "Pending") for t in trials]
    errored = [r for r in results if r["exception_info"] is not None]
    evals: dict[str, Any] = {}
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for result in results:
        if (result.get("finished_at")):
            groups[eval_key(result)].append(result)
    for key, group in sorted(groups.items()):
        rewards = [(r.get("verifier_result") or {}).get("rewards") for r in group]
        reward_stats: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        exception_stats: dict[str, list[str]] = defaultdict(list)
        for result, reward in zip(group, rewards, strict=True):
            for reward_key, value in (reward or {}).items():
                reward_stats[reward_key][f"{value:g}"].append(result["trial_name"])
            if result["exception_info"]:
                exception_stats[result["exception_info"]["exception_type"]].append(
                    result["trial_name"]
                )
        evals[key] = {
            "n_trials": sum(1 for r in rewards if r is not None),
            "n_errors": sum(1 for r in group if r["exception_info"] is not None),
            "metrics": [aggregate_mean(rewards)],
            "pass_at_k": pass_at_k(group),
            "reward_stats": {k: dict(v) for k, v in reward_stats.items()},
            "exception_stats": dict(exception_stats),
            **_usage_totals(group),
        }
    return {
        "n_completed_trials": sum(1 for p in phases if is_finished_phase(p)),
        "n_errored_trials": len(errored),
        "n_running_trials": sum(1 for p in phases if p == "Running"),
        "n_pending_trials": sum(1 for p in phases if p == "Pending"),
        "n_cancelled_trials": sum(
            1 for r in results if (r["exception_info"] or {}).get("exception_type")
            == HarborError.CANCELLED
        ),
        "n_retries": sum(len((t.get("status") or {}).get("attempts") or []) for t in trials),
        **_usage_totals(results),
        "evals": evals,
    }


def job_result(trials: list[Mapping[str, Any]], tasks: Mapping[str, Mapping[str, Any]],
               now: datetime, job_id: str | None = None) -> dict[str, Any]:
    """Harbor's JobResult over these trials; `tasks` maps "namespace/name" → Task."""
    results = [
        trial_result(t, tasks.get(f"{t['metadata'].get('namespace', '')}/"
                                  f"{(t.get('spec') or {}).get('taskRef', {}).get('name', '')}"))
        for t in trials
    ]
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
        "stats": job_stats(results, list(trials)),
        "trial_results": results,
    }


# ---------------------------------------------------------------- Harbor's job directory


def harbor_log_path(key: str, agent: str) -> str | None:
    """Where a logs ConfigMap key goes in Harbor's trial directory (None: nowhere)."""
    names = {"agent.log": f"agent/{agent}.txt", "agent.trajectory.json": "agent/trajectory.json",
             "verifier.log": "verifier/test-stdout.txt"}
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
    ConfigMap, `agent/<agent>.txt`, `agent/trajectory.json` and `verifier/test-stdout.txt`."""
    files = {"result.json": json.dumps(result, indent=2) + "\n"}
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
