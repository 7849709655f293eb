"""A sweep's results computed once: the status, `shipyard sweep results --json` and the
exported job agree, bit for bit with Harbor 0.25's own statistics (computed by Harbor 0.25 on
Python 3.12 from the same trial results, in plan order)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shipyard.api.sweep import SweepSpec
from shipyard.cli.harbor_results import sweep_job
from shipyard.plan.sweep import expand, trial_body
from shipyard.reconcile.sweep_status import observe, resolve_tasks, sweep_status

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
TASKS = ["t1", "t2", "t3", "t4"]
# Chosen so that a plain sum (Python 3.11's) misses Harbor's last bit: nop's pass@2 would be
# 0.6000000000000001 and oracle's mean 0.29500000000000004.
# nop's successes per task over 4 attempts (plus "gone": 4 errors)
SUCCESSES = {"t1": [1, 0, 1, 0], "t2": [0, 1, 0, 1], "t3": [1, 0, 0, 0], "t4": [0, 1, 0, 1]}
# oracle's fractional rewards per task over 4 attempts; None: the trial has no reward
FRACTIONS = {"t1": [0.05, 0.1, 0.05, 0.3], "t2": [0.7, 0.1, 0.9, None],
             "t3": [0.6, 0.05, 0.6, 0.7], "t4": [0.1, 0.9, 0.6, 0.15]}


def task(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "generation": 1},
            "status": {"observedGeneration": 1, "digest": "sha256:" + "ab" * 32,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Valid"}]}}


def sweep_and_trials() -> tuple[dict[str, Any], SweepSpec, list[dict[str, Any]]]:
    spec = SweepSpec.model_validate({
        "tasks": {"names": [*TASKS, "gone"]}, "agents": [{"name": "oracle"}, {"name": "nop"}],
        "attempts": 4, "parallelism": 40})
    sweep = {"metadata": {"name": "sw", "namespace": "ns", "generation": 1,
                          "uid": "11111111-2222-4333-8444-555555555555",
                          "creationTimestamp": "2026-11-26T10:00:00Z"},
             "spec": spec.model_dump(by_alias=True, exclude_none=True),
             "status": {"observedGeneration": 1, "startTime": "2026-11-26T10:00:01Z",
                        "conditions": [{"type": "Complete", "status": "True"}]}}
    trials = []
    for slot in expand([*TASKS, "gone"], spec):
        if slot.task == "gone":
            continue
        body = trial_body(sweep, spec, slot)
        body["metadata"]["uid"] = f"00000000-0000-4000-8000-{slot.index:012d}"
        value = (FRACTIONS if slot.agent_key == "oracle" else SUCCESSES)[slot.task][
            slot.attempt - 1]
        status: dict[str, Any] = {"startedAt": "2026-11-26T10:00:02Z",
                                  "finishedAt": "2026-11-26T10:00:09Z"}
        if value is None:
            status.update(phase="Failed", conditions=[
                {"type": "Failed", "status": "True", "reason": "RewardFileMissing",
                 "message": "no reward file", "lastTransitionTime": "2026-11-26T10:00:09Z"}])
        else:
            status.update(phase="Completed", rewards={"reward": value}, reward=value)
        body["status"] = status
        trials.append(body)
    return sweep, spec, trials


def test_status_json_and_harbor_agree_bit_for_bit() -> None:
    sweep, spec, trials = sweep_and_trials()
    tasks = [task(n) for n in TASKS]
    job, real, _config = sweep_job(sweep, trials, tasks, NOW)
    states = resolve_tasks(spec, tasks, 10**6)
    status = sweep_status(sweep, spec, states, expand([t.name for t in states], spec),
                          [observe(t) for t in trials], NOW)

    assert len(real) == 32 and len(job["trial_results"]) == job["n_total_trials"] == 40
    gone = [r for r in job["trial_results"] if r["task_name"] == "gone"]
    assert len(gone) == 8
    assert {r["exception_info"]["exception_type"] for r in gone} == {"TaskNotFoundError"}
    assert all(r["task_checksum"] is not None for r in job["trial_results"])

    stats = job["stats"]
    # What Harbor 0.25 computes (JobStats.from_trial_results, Mean, pass@k on Python 3.12)
    # from these 40 trial results in this order:
    harbor = {
        "nop__sw": {"n_trials": 16, "n_errors": 4, "metrics": [{"mean": 0.35}],
                    "pass_at_k": {"2": 0.6, "4": 0.8}},
        "oracle__sw": {"n_trials": 15, "n_errors": 5, "metrics": [{"mean": 0.295}],
                       "pass_at_k": {}},
    }
    assert {k: {f: v[f] for f in ("n_trials", "n_errors", "metrics", "pass_at_k")}
            for k, v in stats["evals"].items()} == harbor
    assert (stats["n_completed_trials"], stats["n_errored_trials"]) == (40, 9)
    for e in status.evals:
        mine = stats["evals"][e.key]
        assert (e.n_trials, e.n_errors, e.metrics, e.pass_at_k) == (
            mine["n_trials"], mine["n_errors"], mine["metrics"], mine["pass_at_k"])
        assert e.exception_counts == {k: len(v) for k, v in mine["exception_stats"].items()}
    assert (status.counts.completed, status.counts.errored) == (40, 9)


def test_the_export_has_harbors_job_and_trial_configs() -> None:
    from shipyard.cli.harbor_results import trial_files

    sweep, _spec, trials = sweep_and_trials()
    job, _, config = sweep_job(sweep, trials, [task(n) for n in TASKS], NOW)
    assert config["job_name"] == "sw" and config["n_attempts"] == 4
    assert [a["name"] for a in config["agents"]] == ["oracle", "nop"]
    assert config["datasets"] == [{"name": "sw", "task_names": [*TASKS, "gone"]}]
    assert job["started_at"] is not None
    for result in job["trial_results"]:
        files = trial_files(result, None)
        assert "config.json" in files and result["agent_info"]["version"]
        assert result["task_checksum"] is not None


def test_the_report_names_every_eval_key_and_task_and_links_the_trials() -> None:
    from shipyard.cli.sweep_report import chart_data, charts, report_html

    sweep, _spec, trials = sweep_and_trials()
    job, _, config = sweep_job(sweep, trials, [task(n) for n in TASKS], NOW)
    page = report_html(job, config, "Sweep ns/sw", "jobs", "/* runtime */")
    for key in ("nop__sw", "oracle__sw", *TASKS, "gone"):
        assert key in page
    first = job["trial_results"][0]["trial_name"]
    assert f'href="jobs/sw/{first}/"' in page
    assert "https://" not in page.replace("https://vega.github.io", "")  # nothing fetched
    data = chart_data(job, "sw", "jobs")
    assert {(c["task"], c["agent"]) for c in data["heat"]} == {
        (t, a) for t in [*TASKS, "gone"] for a in ("oracle", "nop")}
    assert set(charts(data)) == {"heatmap", "usage", "failures"}  # no phase timings here
