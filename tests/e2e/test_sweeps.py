"""Sweeps end to end on the real cluster: a 100-trial sweep through the CLI, the parallelism
ceilings checked from a watch, suspend/resume, bad tasks, retries of unscored trials, the
operator SIGKILLed during a 200-trial sweep (opt-in) and Harbor 0.25's own models reading
`shipyard sweep results` (opt-in)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from shipyard.api.conventions import FINISHED_PHASES, selector_string, sweep_selector
from shipyard.api.sweep import SweepSpec
from shipyard.plan.sweep import expand, trial_name
from shipyard.taskformat import pass_at_k
from tests.e2e.conftest import GROUP, VERSION
from tests.e2e.test_cli import ok, shipyard_cli
from tests.harbor_venv import harbor_python

BUSYBOX = "localhost/shipyard/busybox:latest"
FINISHED = FINISHED_PHASES


def trivial_task(directory: Path, reward_file: bool = True) -> Path:
    """oracle → 1, nop → 0 on the static busybox image (fast); without `reward_file` the
    tests write no reward at all."""
    directory.mkdir(parents=True)
    (directory / "task.toml").write_text(
        f'[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n'
        f'[environment]\ndocker_image = "{BUSYBOX}"\n')
    (directory / "instruction.md").write_text("Write ok to /tmp/out.\n")
    (directory / "solution").mkdir()
    (directory / "solution/solve.sh").write_text("#!/bin/sh\necho ok > /tmp/out\n")
    (directory / "tests").mkdir()
    (directory / "tests/test.sh").write_text(
        "#!/bin/sh\ngrep -q ok /tmp/out && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n" if reward_file else "#!/bin/sh\ntrue\n")
    return directory


def dataset(root: Path, n: int) -> Path:
    for i in range(n):
        trivial_task(root / f"task-{i:02d}")
    return root


def inline_task(name: str, reward_file: bool = True, labels: dict | None = None,
                toml: str | None = None) -> dict[str, Any]:
    test = ("#!/bin/sh\ngrep -q ok /tmp/out && echo 1 > /logs/verifier/reward.txt"
            " || echo 0 > /logs/verifier/reward.txt\n" if reward_file else "#!/bin/sh\ntrue\n")
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"source": {"inline": {"files": {
            "task.toml": toml or f'[environment]\ndocker_image = "{BUSYBOX}"\n',
            "instruction.md": "Write ok to /tmp/out.\n",
            "solution/solve.sh": "#!/bin/sh\necho ok > /tmp/out\n",
            "tests/test.sh": test,
        }}}},
    }


class TrialWatch(threading.Thread):
    """Every Trial event of a namespace, from a watch: the non-terminal count (overall and per
    task) after each event, its maximum, and when each Trial appeared."""

    def __init__(self, custom_objects, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api, self.namespace = custom_objects, namespace
        self.phase: dict[str, str] = {}
        self.task: dict[str, str] = {}
        self.created: dict[str, float] = {}
        self.max_active = 0
        self.max_per_task: dict[str, int] = defaultdict(int)
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.errors: list[str] = []
        self.relists = 0
        self.retries = 0

    def run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        version: str | None = self.relist()
        self.ready.set()
        while not self.stop.is_set():
            if version is None:
                version = self.relist()
            try:
                for event in watch.Watch().stream(
                        self.api.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
                        "trials", resource_version=version, timeout_seconds=5,
                        allow_watch_bookmarks=True):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue
                    self.seen(event["type"], obj)
                    if self.stop.is_set():
                        return
            except ApiException as e:
                if e.status in (429, 500, 503, 504):  # a busy shared apiserver: go on from
                    self.retries += 1                 # the same version, nothing is missed
                    time.sleep(1)
                    continue
                if e.status != 410:
                    self.errors.append(f"watch failed: {e.status}")
                    return
                self.relists += 1  # expired (a busy shared cluster): list, then watch again
                version = None

    def relist(self) -> str:
        listed = self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "trials")
        for obj in listed["items"]:
            self.seen("LISTED", obj)
        return listed["metadata"]["resourceVersion"]

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.phase.pop(name, None)
            return
        self.created.setdefault(name, time.monotonic())
        self.task[name] = obj["spec"]["taskRef"]["name"]
        self.phase[name] = (obj.get("status") or {}).get("phase") or "Pending"
        active = [n for n, p in self.phase.items() if p not in FINISHED]
        self.max_active = max(self.max_active, len(active))
        per_task: dict[str, int] = defaultdict(int)
        for n in active:
            per_task[self.task[n]] += 1
        for task, count in per_task.items():
            self.max_per_task[task] = max(self.max_per_task[task], count)

    def __enter__(self) -> TrialWatch:
        self.start()
        assert self.ready.wait(30), "the trial watch did not start"
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        self.join(15)


def get_sweep(custom_objects, namespace: str, name: str) -> dict[str, Any]:
    return custom_objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps",
                                                       name)


def create_sweep(custom_objects, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep", "metadata": {"name": name},
            "spec": spec}
    return custom_objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps",
                                                          body)


def wait_sweep(custom_objects, namespace: str, name: str, until, timeout: float = 300
               ) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    sweep: dict[str, Any] = {}
    while time.monotonic() < deadline:
        sweep = get_sweep(custom_objects, namespace, name)
        if until(sweep):
            return sweep
        time.sleep(1)
    raise AssertionError(f"sweep {name}: not there after {timeout}s: {sweep.get('status')}")


def cond(sweep: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (sweep.get("status") or {}).get("conditions") or []
                 if c["type"] == type_), None)


def complete(sweep: dict[str, Any]) -> bool:
    c = cond(sweep, "Complete")
    return c is not None and c["status"] == "True"


def sweep_trials(custom_objects, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = selector_string(sweep_selector(name))
    return custom_objects.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "trials", label_selector=selector)["items"]


def check_plan_ran_once(sweep: dict[str, Any], trials: list[dict[str, Any]],
                        tasks: list[str]) -> None:
    """Exactly one Trial per plan slot, named as planned: nothing duplicated, nothing lost,
    each with its reward (oracle 1, nop 0), and the metrics Harbor would compute."""
    spec = SweepSpec.model_validate(sweep["spec"])
    slots = expand(tasks, spec)
    planned = {trial_name(sweep["metadata"]["name"], s) for s in slots}
    names = [t["metadata"]["name"] for t in trials]
    assert len(names) == len(set(names)) == len(planned)
    assert set(names) == planned
    by_key: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for t in trials:
        status = t["status"]
        agent = t["spec"]["agent"]["name"]
        assert status["phase"] == "Completed", (t["metadata"]["name"], status)
        assert status["reward"] == (1.0 if agent == "oracle" else 0.0)
        by_key[agent][t["spec"]["taskRef"]["name"]].append(status.get("rewards"))
    status = sweep["status"]
    assert status["counts"]["planned"] == status["counts"]["completed"] == len(slots)
    assert status["counts"]["created"] == len(slots)
    assert status["counts"]["errored"] == 0 and status["counts"]["retried"] == 0
    assert status["completedIndexes"] == f"0-{len(slots) - 1}"
    assert status["mean"] == 0.5
    evals = {e["agent"]: e for e in status["evals"]}
    for agent, by_task in by_key.items():
        expected = {str(k): v for k, v in pass_at_k(by_task).items()}
        assert expected and evals[agent]["passAtK"] == pytest.approx(expected)
        assert evals[agent]["metrics"] == [{"mean": 1.0 if agent == "oracle" else 0.0}]


# ---------------------------------------------------------------- the tests


@pytest.mark.timeout(1200)
def test_sweep_of_100_trials_through_the_cli(shipyard, cluster, custom_objects, tmp_path
                                             ) -> None:
    ns = shipyard.namespace
    data = dataset(tmp_path / "smoke-ds", 10)
    with TrialWatch(custom_objects, ns) as watch:
        began = time.monotonic()
        result = shipyard_cli(cluster, "sweep", "run", str(data), "-a", "oracle", "-a", "nop",
                              "--attempts", "5", "--parallelism", "10", "--name", "s100",
                              "--watch", "--timeout", "900", "-n", ns, timeout=960)
        wall = time.monotonic() - began
    out = ok(result)
    assert "tasks in" in result.stderr and "10 created" in result.stderr
    assert "s100: Complete" in out
    assert not watch.errors
    assert 0 < watch.max_active <= 10, watch.max_active
    sweep = get_sweep(custom_objects, ns, "s100")
    tasks = [f"task-{i:02d}" for i in range(10)]
    check_plan_ran_once(sweep, sweep_trials(custom_objects, ns, "s100"), tasks)
    print(f"100 trials in {wall:.0f}s, at most {watch.max_active} running at once (watch "
          f"re-lists {watch.relists}, retries {watch.retries})")

    cluster.kubectl_run("-n", ns, "wait", "--for=condition=Complete", "sweep/s100",
                        "--timeout=10s")
    listed = ok(shipyard_cli(cluster, "get", "sweeps", "-n", ns))
    assert "s100" in listed and "100/100" in listed and "Complete" in listed
    columns = cluster.kubectl_run("-n", ns, "get", "sweep", "s100").stdout
    assert "100/100" in columns and "0.5" in columns

    # pushing the same directories again changes nothing
    again = shipyard_cli(cluster, "sweep", "run", str(data), "-a", "oracle", "--name", "s-again",
                         "-n", ns)
    ok(again)
    assert "0 created, 0 updated, 10 unchanged" in again.stderr
    custom_objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "sweeps", "s-again")

    ok(shipyard_cli(cluster, "sweep", "results", "s100", "-o", str(tmp_path / "jobs"), "-n", ns))
    results = tmp_path / "jobs" / "s100"  # Harbor's jobs directory: `harbor view DIR`
    assert json.loads((results / "config.json").read_text())["n_attempts"] == 5
    job = json.loads((results / "result.json").read_text())
    assert job["n_total_trials"] == 100
    assert job["stats"]["n_completed_trials"] == 100
    assert set(job["stats"]["evals"]) == {"oracle__s100", "nop__s100"}
    assert job["stats"]["evals"]["oracle__s100"]["pass_at_k"] == {"2": 1.0, "4": 1.0, "5": 1.0}
    assert job["stats"]["evals"]["nop__s100"]["metrics"] == [{"mean": 0.0}]
    trial_dirs = [p for p in results.iterdir() if p.is_dir()]
    assert len(trial_dirs) == 100
    one = next(p for p in trial_dirs if json.loads((p / "result.json").read_text())
               ["agent_info"]["name"] == "oracle")
    assert (one / "verifier/reward.txt").read_text().strip() == "1"
    assert (one / "agent/oracle.txt").exists() and (one / "verifier/test-stdout.txt").exists()


def test_per_task_parallelism_one_serializes_a_tasks_trials(shipyard, custom_objects) -> None:
    ns = shipyard.namespace
    for name in ("pa", "pb"):
        shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks",
                                                     inline_task(name))
    with TrialWatch(custom_objects, ns) as watch:
        create_sweep(custom_objects, ns, "serial", tasks={"names": ["pa", "pb"]},
                     agents=[{"name": "oracle"}, {"name": "nop"}], attempts=2, parallelism=8,
                     perTaskParallelism=1)
        sweep = wait_sweep(custom_objects, ns, "serial", complete, timeout=300)
    assert not watch.errors
    assert dict(watch.max_per_task) == {"pa": 1, "pb": 1}
    assert watch.max_active == 2
    check_plan_ran_once(sweep, sweep_trials(custom_objects, ns, "serial"), ["pa", "pb"])


def test_suspend_stops_new_trials_within_seconds_and_resume_finishes(shipyard, custom_objects
                                                                     ) -> None:
    ns = shipyard.namespace
    # Each trial's verifier takes a few seconds: on a quiet node a trivial trial takes ~2 s,
    # and the whole sweep could finish before its status shows the first two completions.
    task = inline_task("st")
    files = task["spec"]["source"]["inline"]["files"]
    files["tests/test.sh"] = files["tests/test.sh"].replace("#!/bin/sh\n", "#!/bin/sh\nsleep 4\n")
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks", task)
    with TrialWatch(custom_objects, ns) as watch:
        create_sweep(custom_objects, ns, "susp", tasks={"names": ["st"]},
                     agents=[{"name": "oracle"}, {"name": "nop"}], attempts=6, parallelism=2)
        wait_sweep(custom_objects, ns, "susp",
                   lambda s: (s.get("status") or {}).get("counts", {}).get("completed", 0) >= 2)
        custom_objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "sweeps", "susp",
                                                      {"spec": {"suspend": True}})
        suspended_at = time.monotonic()
        sweep = wait_sweep(custom_objects, ns, "susp",
                           lambda s: (cond(s, "Suspended") or {}).get("status") == "True",
                           timeout=30)
        # the Trials running when it was suspended finish; no new one appears
        wait_sweep(custom_objects, ns, "susp", lambda s: s["status"]["counts"]["running"]
                   + s["status"]["counts"]["pending"] == 0, timeout=120)
        created_then = len(watch.created)
        time.sleep(10)
        assert len(watch.created) == created_then
        late = [t - suspended_at for t in watch.created.values() if t > suspended_at]
        assert all(delay < 3 for delay in late), late
        sweep = get_sweep(custom_objects, ns, "susp")
        assert sweep["status"]["counts"]["completed"] < 12
        assert not complete(sweep)

        custom_objects.patch_namespaced_custom_object(GROUP, VERSION, ns, "sweeps", "susp",
                                                      {"spec": {"suspend": False}})
        sweep = wait_sweep(custom_objects, ns, "susp", complete, timeout=300)
    assert cond(sweep, "Suspended")["status"] == "False"
    assert watch.max_active <= 2
    check_plan_ran_once(sweep, sweep_trials(custom_objects, ns, "susp"), ["st"])


def test_bad_tasks_are_named_and_counted_as_errors_and_unscored_slots_retried(
        shipyard, cluster, custom_objects) -> None:
    ns = shipyard.namespace
    for body in (inline_task("good"), inline_task("noreward", reward_file=False),
                 inline_task("broken", toml='[agent]\ntimeout_sec = "soon"\n')):
        shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks", body)
    create_sweep(custom_objects, ns, "mixed", tasks={"names": ["good", "noreward", "nosuch",
                                                               "broken"]},
                 agents=[{"name": "oracle"}, {"name": "nop"}], attempts=1, parallelism=4)
    # the missing task is waited for SHIPYARD_TASK_WAIT_SEC (10 s in the tests), then counted
    sweep = wait_sweep(custom_objects, ns, "mixed", complete, timeout=240)
    tasks_ready = cond(sweep, "TasksReady")
    assert tasks_ready["status"] == "False"
    assert "task nosuch not found" in tasks_ready["message"]
    assert "task broken: TaskInvalid" in tasks_ready["message"]
    assert "timeout_sec" in tasks_ready["message"]
    counts = sweep["status"]["counts"]
    assert counts["planned"] == counts["completed"] == 8
    assert counts["created"] == 4  # good and noreward, each with both agents
    assert counts["errored"] == 6 and counts["failed"] == 6
    oracle = next(e for e in sweep["status"]["evals"] if e["agent"] == "oracle")
    assert oracle["exceptionCounts"] == {"RewardFileNotFoundError": 1, "TaskInvalidError": 1,
                                         "TaskNotFoundError": 1}
    assert oracle["metrics"] == [{"mean": 0.25}]
    events = [e.reason for e in shipyard.events("mixed")]
    assert "TaskInvalid" in events or "TaskNotFound" in events

    before = {t["metadata"]["name"] for t in sweep_trials(custom_objects, ns, "mixed")}
    ok(shipyard_cli(cluster, "sweep", "retry", "mixed", "-n", ns))
    sweep = wait_sweep(custom_objects, ns, "mixed",
                       lambda s: s["status"]["counts"]["retried"] == 2 and complete(s)
                       and s["status"]["observedGeneration"] == s["metadata"]["generation"],
                       timeout=180)
    after = {t["metadata"]["name"]: t for t in sweep_trials(custom_objects, ns, "mixed")}
    assert before < set(after)  # the old Trials are kept
    retried = sorted(set(after) - before)
    assert len(retried) == 2 and all(n.endswith("-r1") for n in retried)
    assert {after[n]["spec"]["taskRef"]["name"] for n in retried} == {"noreward"}
    assert sweep["status"]["counts"]["created"] == 4  # slots, not Trials
    assert sweep["status"]["counts"]["errored"] == 6  # the retries failed again


@pytest.mark.optin
@pytest.mark.timeout(2400)
def test_operator_killed_three_times_during_a_200_trial_sweep(shipyard, operator,
                                                              custom_objects) -> None:
    ns = shipyard.namespace
    tasks = [f"k{i:02d}" for i in range(20)]
    for name in tasks:
        shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks",
                                                     inline_task(name, labels={"ds": "kill"}))
    kills = []
    with TrialWatch(custom_objects, ns) as watch:
        began = time.monotonic()
        create_sweep(custom_objects, ns, "kill", tasks={"selector": {"matchLabels": {
            "ds": "kill"}}}, agents=[{"name": "oracle"}, {"name": "nop"}], attempts=5,
                     parallelism=20)
        for fraction in (0.2, 0.45, 0.7):
            wait_sweep(custom_objects, ns, "kill", lambda s, f=fraction: (s.get("status") or {})
                       .get("counts", {}).get("completed", 0) >= 200 * f, timeout=900)
            operator.kill()
            kills.append(round(time.monotonic() - began))
            time.sleep(5)
            operator.start()
        sweep = wait_sweep(custom_objects, ns, "kill", complete, timeout=1200)
        wall = time.monotonic() - began
    assert not watch.errors
    assert watch.max_active <= 20, watch.max_active
    check_plan_ran_once(sweep, sweep_trials(custom_objects, ns, "kill"), tasks)
    print(f"200 trials in {wall:.0f}s with the operator SIGKILLed at {kills} s; at most "
          f"{watch.max_active} running at once (watch re-lists {watch.relists}, "
          f"retries {watch.retries})")


HARBOR_CHECK = """
import json, sys
from pathlib import Path
from harbor.models.job.result import JobResult
from harbor.models.trial.result import TrialResult
root = Path(sys.argv[1])
job = JobResult.model_validate_json((root / "result.json").read_text())
trials = [TrialResult.model_validate_json(p.read_text()) for p in root.glob("*/result.json")]
print(json.dumps({"n_total": job.n_total_trials, "evals": sorted(job.stats.evals),
                  "trials": len(trials),
                  "rewards": sorted(t.verifier_result.rewards["reward"] for t in trials)}))
"""


@pytest.mark.optin
@pytest.mark.timeout(2400)
def test_sweep_results_load_with_harbors_own_models(shipyard, cluster, custom_objects,
                                                    tmp_path) -> None:
    python = harbor_python()
    ns = shipyard.namespace
    for name in ("ha", "hb"):
        shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks",
                                                     inline_task(name))
    create_sweep(custom_objects, ns, "hb", tasks={"names": ["ha", "hb"]},
                 agents=[{"name": "oracle"}, {"name": "nop", "model": "none/zero"}],
                 attempts=2, parallelism=8)
    sweep = wait_sweep(custom_objects, ns, "hb", complete, timeout=300)
    ok(shipyard_cli(cluster, "sweep", "results", "hb", "-o", str(tmp_path / "job"), "-n", ns))
    loaded = subprocess.run([python, "-c", HARBOR_CHECK, str(tmp_path / "job" / "hb")],
                            capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    seen = json.loads(loaded.stdout)
    # The model by its name without the provider, as Harbor's ModelInfo (none/zero → zero).
    assert seen == {"n_total": 8, "evals": ["nop__zero__hb", "oracle__hb"], "trials": 8,
                    "rewards": [0.0] * 4 + [1.0] * 4}
    assert sorted(e["key"] for e in sweep["status"]["evals"]) == seen["evals"]


def test_the_api_refuses_a_sweep_with_bad_attempts_or_an_unknown_agent(crds, custom_objects,
                                                                       namespace) -> None:
    from kubernetes.client.rest import ApiException

    for spec, field in (({"attempts": 0}, "spec.attempts"),
                        ({"agents": [{"name": "no-such-agent"}]}, "spec.agents[0].name"),
                        ({"agents": []}, "spec.agents")):
        body = {"tasks": {"names": ["a"]}, "agents": [{"name": "oracle"}], **spec}
        with pytest.raises(ApiException) as refused:
            create_sweep(custom_objects, namespace, "bad", **body)
        assert refused.value.status == 422
        assert field in json.loads(refused.value.body)["message"]


def test_a_namespace_deleted_mid_sweep_and_made_again_runs_the_sweep_again_to_its_end(
        shipyard, custom_objects, core_v1) -> None:
    """A user deletes the namespace of a running Sweep (its Trials, pods, ConfigMaps and
    policies go with it) and, the operator still running, makes it again under the same name
    and applies the same Task and Sweep: the namespace goes (no finalizer of the operator's
    holds it), and the second Sweep runs each of its trials once to its reward, as a first
    would, in pods kept out of the cluster by the namespace's baseline made again."""
    from kubernetes import client

    ns = shipyard.namespace

    def apply() -> None:
        shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks",
                                                     inline_task("pa"))
        create_sweep(custom_objects, ns, "again", tasks={"names": ["pa"]},
                     agents=[{"name": "oracle"}, {"name": "nop"}], attempts=3, parallelism=2)

    apply()
    wait_sweep(custom_objects, ns, "again",
               lambda s: any(t["status"].get("phase") in FINISHED
                             for t in sweep_trials(custom_objects, ns, "again")
                             if t.get("status")), timeout=180)
    core_v1.delete_namespace(ns, propagation_policy="Background")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            core_v1.read_namespace(ns)
        except client.ApiException as e:
            if e.status == 404:
                break
            raise
        time.sleep(0.5)
    else:
        left = {plural: [o["metadata"]["name"] for o in custom_objects
                         .list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]]
                for plural in ("sweeps", "trials", "tasks")}
        raise AssertionError(f"namespace {ns} still there after 120 s: {left}")
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=ns, labels={"shipyard.dev/test-namespace": "true"})))
    deadline = time.monotonic() + 60
    while True:
        try:
            core_v1.read_namespaced_service_account("default", ns)
            break
        except client.ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)
    apply()
    sweep = wait_sweep(custom_objects, ns, "again", complete, timeout=300)
    check_plan_ran_once(sweep, sweep_trials(custom_objects, ns, "again"), ["pa"])
    networking = client.NetworkingV1Api(core_v1.api_client)
    shared = {p.metadata.name for p in networking.list_namespaced_network_policy(ns).items}
    assert {"shipyard-trial-pods-deny", "shipyard-trial-pods-public"} <= shared


def test_a_sweep_deleted_and_applied_again_at_once_runs_each_trial_again_in_its_own_pods(
        shipyard, custom_objects) -> None:
    """`kubectl delete` then `apply` of a running Sweep: its trials' names are fixed by its
    plan, so the new Sweep's Trials, pods and ConfigMaps take names the old ones still hold
    until the garbage collector removes them. The new Sweep runs every slot once, each trial
    in a pod of its own (a nop scores 0 even where an oracle of the old Sweep wrote the
    answer), its Trials and their objects all its own."""
    ns = shipyard.namespace
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks",
                                                 inline_task("ra"))
    spec = {"tasks": {"names": ["ra"]}, "agents": [{"name": "oracle"}, {"name": "nop"}],
            "attempts": 2, "parallelism": 4}
    create_sweep(custom_objects, ns, "redo", **spec)
    # Trials started (running or, being quick, already finished: their objects hold the
    # names either way until the Sweep's deletion reaches them).
    wait_sweep(custom_objects, ns, "redo",
               lambda s: sum(1 for t in sweep_trials(custom_objects, ns, "redo")
                             if (t.get("status") or {}).get("phase") in ("Running", *FINISHED))
               >= 2, timeout=120)
    custom_objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "sweeps", "redo")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not any(s["metadata"]["name"] == "redo" for s in custom_objects
                   .list_namespaced_custom_object(GROUP, VERSION, ns, "sweeps")["items"]):
            break
        time.sleep(0.1)
    uid = create_sweep(custom_objects, ns, "redo", **spec)["metadata"]["uid"]
    sweep = wait_sweep(custom_objects, ns, "redo", complete, timeout=300)
    trials = sweep_trials(custom_objects, ns, "redo")
    check_plan_ran_once(sweep, trials, ["ra"])
    for trial in trials:
        assert [o["uid"] for o in trial["metadata"]["ownerReferences"]] == [uid]


def test_a_sweep_too_large_to_plan_is_refused_with_the_operator_s_memory_bounded(
        shipyard, operator, custom_objects) -> None:
    """Bad input, a Sweep: `attempts: 1000000000` used to be expanded slot by slot in the
    operator (its memory grew by 340 MB in 20 s, to the OOM kill). The apiserver now refuses
    it (the CRD's maximum); 100,000 attempts of two agents (200,000 trials) fail the Sweep
    `TooManyTrials` saying so, with no Trial created and the operator's memory as it was."""
    from kubernetes.client.rest import ApiException

    from tests.e2e.test_trust import _rss_kib

    ns = shipyard.namespace
    custom_objects.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks",
                                                   inline_task("big"))
    with pytest.raises(ApiException) as refused:
        create_sweep(custom_objects, ns, "absurd", tasks={"names": ["big"]},
                     agents=[{"name": "nop"}], attempts=10**9)
    assert refused.value.status == 422 and "spec.attempts" in refused.value.body
    assert operator.proc is not None
    before = _rss_kib(operator.proc.pid)
    create_sweep(custom_objects, ns, "huge", tasks={"names": ["big"]},
                 agents=[{"name": "nop"}, {"name": "oracle"}], attempts=100_000)
    sweep = wait_sweep(custom_objects, ns, "huge", lambda s: cond(s, "Failed"), timeout=60)
    failed = cond(sweep, "Failed")
    assert failed["reason"] == "TooManyTrials", failed
    assert "is 200,000 trials: more than the 100,000 one Sweep may plan" in failed["message"]
    time.sleep(5)
    assert sweep_trials(custom_objects, ns, "huge") == []
    assert _rss_kib(operator.proc.pid) - before < 50 * 1024
