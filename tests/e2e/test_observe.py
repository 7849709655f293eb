"""See what runs: one sweep (two agents, random rewards, a Task that never exists, a task that
writes no reward) run by an operator of its own, scraped by a real Prometheus (Debian's
`prometheus`) during the sweep. Its results agree everywhere (the status, `sweep results`,
`--json`, the exported job), Prometheus holds what the Trials' status implies, every panel of
the chart's Grafana dashboard has data, and the report opens in headless Chromium. The opt-in
test checks the numbers against Harbor 0.25's own code and the export in Harbor's viewer."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shipyard.reconcile.trial_metrics import DURATION_BUCKETS
from tests.conftest import TEST_NAMESPACE_LABEL, TEST_NAMESPACE_PREFIX
from tests.e2e.conftest import GROUP, VERSION, OperatorProcess, own_operator
from tests.e2e.test_cli import ok, shipyard_cli
from tests.e2e.test_sweeps import BUSYBOX, create_sweep, sweep_trials, wait_sweep
from tests.harbor_venv import VIEWER_CLIENT, harbor_python, harbor_view
from tests.unit.cli.test_chart import dashboard_queries

ROOT = Path(__file__).resolve().parents[2]
ATTEMPTS = 4
# oracle (it writes ok) gets a random fraction, nop a random 0 or 1: means and pass@k whose last
# bits depend on how they are summed.
RANDOM_TEST = """#!/bin/sh
if grep -q ok /tmp/out 2>/dev/null; then
  awk -v s="$RANDOM$$" 'BEGIN { srand(s); printf "%.3f\\n", rand() }' > /logs/verifier/reward.txt
else
  echo $(( RANDOM % 2 )) > /logs/verifier/reward.txt
fi
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def debian_binary(binary: str, package: str) -> str:
    """The binary, installed from Debian's package when missing (as root, as hack/test.sh)."""
    found = shutil.which(binary)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    if found is None and subprocess.run(install, capture_output=True, env=env,
                                        timeout=900).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, env=env,
                       timeout=600)
        subprocess.run(install, check=True, capture_output=True, env=env, timeout=900)
    found = found or shutil.which(binary)
    assert found, f"{binary} not found after installing {package}"
    return found


def task(name: str, test: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
            "spec": {"source": {"inline": {"files": {
                "task.toml": f'[environment]\ndocker_image = "{BUSYBOX}"\n',
                "instruction.md": "Write ok to /tmp/out.\n",
                "solution/solve.sh": "#!/bin/sh\necho ok > /tmp/out\n",
                "tests/test.sh": test}}}}}


class Prometheus:
    def __init__(self, directory: Path, target_port: int) -> None:
        binary = debian_binary("prometheus", "prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: shipyard-operator\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = directory / "prometheus.log"
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2)
                return
            except OSError:
                assert self.proc.poll() is None, self.log.read_text()[-2000:]
                time.sleep(0.5)
        raise AssertionError(f"prometheus not ready: {self.log.read_text()[-2000:]}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(urllib.request.urlopen(url, timeout=10).read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, (expr, result)
        return float(result[0]["value"][1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)


@dataclass
class Observed:
    namespace: str
    sweep: dict[str, Any]
    trials: list[dict[str, Any]]
    prometheus: Prometheus
    operator: OperatorProcess
    workdir: Path


@pytest.fixture(scope="module")
def observed(cluster, crds, core_v1, custom_objects, tmp_path_factory) -> Iterator[Observed]:
    """The sweep, run by an operator of its own (its histograms hold this sweep's Trials only)
    serving one namespace outside `<prefix>-*`, scraped every second by Prometheus."""

    workdir = tmp_path_factory.mktemp("observe")
    port = free_port()
    ns, operator = own_operator(cluster, core_v1, workdir / "operator.log", "obs",
                                metrics_port=port)
    prometheus = None
    try:
        prometheus = Prometheus(workdir, port)
        for name, test in (("rnd", RANDOM_TEST), ("noreward", "#!/bin/sh\ntrue\n")):
            custom_objects.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks",
                                                           task(name, test))
        create_sweep(custom_objects, ns, "obs", tasks={"names": ["rnd", "noreward", "nosuch"]},
                     agents=[{"name": "oracle"}, {"name": "nop"}], attempts=ATTEMPTS,
                     parallelism=8)
        sweep = wait_sweep(custom_objects, ns, "obs", lambda s: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (s.get("status") or {}).get("conditions") or []), timeout=600)
        time.sleep(4)  # a few more scrapes after the last Trial's end
        yield Observed(ns, sweep, sweep_trials(custom_objects, ns, "obs"), prometheus,
                       operator, workdir)
    finally:
        if prometheus is not None:
            prometheus.stop()
        operator.stop()
        core_v1.delete_namespace(ns)


def sweep_json(cluster, observed: Observed) -> dict[str, Any]:
    return json.loads(ok(shipyard_cli(cluster, "sweep", "results", "obs", "--json", "-n",
                                      observed.namespace)))


def test_status_results_json_and_export_agree_exactly(cluster, observed) -> None:
    status = observed.sweep["status"]
    assert status["counts"]["planned"] == 3 * 2 * ATTEMPTS
    assert status["counts"]["errored"] == 4 * ATTEMPTS  # nosuch's 8 slots and noreward's 8
    job = sweep_json(cluster, observed)
    jobs = observed.workdir / "jobs"
    ok(shipyard_cli(cluster, "sweep", "results", "obs", "-o", str(jobs), "-n",
                    observed.namespace))
    exported = json.loads((jobs / "obs" / "result.json").read_text())
    assert exported["stats"] == job["stats"]
    assert exported["n_total_trials"] == job["n_total_trials"] == status["counts"]["planned"]
    stats = job["stats"]
    assert stats["n_completed_trials"] == status["counts"]["completed"]
    assert stats["n_errored_trials"] == status["counts"]["errored"]
    for e in status["evals"]:
        mine = stats["evals"][e["key"]]
        # the status came through the API server's JSON: floats as their shortest repr, exact
        assert e["metrics"] == mine["metrics"], e["key"]
        assert e.get("passAtK", {}) == mine["pass_at_k"], e["key"]
        assert (e["nTrials"], e["nErrors"]) == (mine["n_trials"], mine["n_errors"])
        assert e["exceptionCounts"] == {k: len(v) for k, v in mine["exception_stats"].items()}
    assert stats["evals"]["nop__obs"]["pass_at_k"], "nop's 0/1 rewards have pass@k"
    # the missing Task's slots are failed trials of the export, like everywhere else
    trial_dirs = [p for p in (jobs / "obs").iterdir() if p.is_dir()]
    assert len(trial_dirs) == status["counts"]["planned"]
    missing = [json.loads((p / "result.json").read_text()) for p in trial_dirs
               if json.loads((p / "result.json").read_text())["task_name"] == "nosuch"]
    assert len(missing) == 2 * ATTEMPTS
    assert {r["exception_info"]["exception_type"] for r in missing} == {"TaskNotFoundError"}
    assert all((p / "config.json").exists() for p in trial_dirs)
    config = json.loads((jobs / "obs" / "config.json").read_text())
    assert [a["name"] for a in config["agents"]] == ["oracle", "nop"]
    # the table prints the same numbers
    table = ok(shipyard_cli(cluster, "sweep", "results", "obs", "-n", observed.namespace))
    for key, e in stats["evals"].items():
        line = next(line for line in table.splitlines() if line.startswith(key + ":"))
        assert f"mean {e['metrics'][0]['mean']:.4g}" in line
        assert f"{e['n_errors']} error(s)" in line


def test_prometheus_holds_what_the_trials_status_implies(observed) -> None:
    prom, ns = observed.prometheus, observed.namespace
    phases: dict[str, int] = {}
    for t in observed.trials:
        phases[t["status"]["phase"]] = phases.get(t["status"]["phase"], 0) + 1
    for phase in ("Pending", "Running", "Completed", "Failed"):
        assert prom.value(f'shipyard_trials{{namespace="{ns}",phase="{phase}"}}') == \
            phases.get(phase, 0), phase
    assert phases["Completed"] == 2 * ATTEMPTS and phases["Failed"] == 2 * ATTEMPTS
    assert prom.value('shipyard_trial_outcomes_total{reason="RewardRecorded"}') == \
        phases["Completed"]
    assert prom.value('shipyard_trial_outcomes_total{reason="RewardFileMissing"}') == \
        phases["Failed"]

    durations = sorted(
        (parse(r["finishedAt"]) - parse(r["startedAt"]))
        for t in observed.trials for r in t["status"].get("phases") or []
        if r["name"] == "agent" and r.get("startedAt") and r.get("finishedAt"))
    assert len(durations) >= phases["Completed"]  # every trial with a reward ran its agent
    count = 'shipyard_trial_phase_duration_seconds_count{phase="agent"}'
    assert prom.value(count) == len(durations)
    total = prom.value('shipyard_trial_phase_duration_seconds_sum{phase="agent"}')
    assert math.isclose(total, sum(durations), rel_tol=1e-9, abs_tol=1e-6)
    # The median as Prometheus estimates it lies in the bucket of the median the status has.
    median = prom.value('histogram_quantile(0.5, sum by (le) '
                        '(shipyard_trial_phase_duration_seconds_bucket{phase="agent"}))')
    true_median = durations[math.ceil(0.5 * len(durations)) - 1]
    upper = next(b for b in DURATION_BUCKETS if true_median <= b)
    lower = max([0.0, *(b for b in DURATION_BUCKETS if b < upper)])
    assert lower <= median <= upper, (median, true_median, durations)
    assert prom.value("shipyard_trial_time_to_reward_seconds_count") == phases["Completed"]
    assert prom.value('sum(shipyard_reconcile_total{kind="trial",result="success"})') > 0
    assert prom.value('sum(shipyard_api_requests_total{verb="create",resource="pods"})') >= \
        len(observed.trials)


def parse(value: str) -> float:
    from shipyard.api.conventions import parse_time

    parsed = parse_time(value)
    assert parsed is not None
    return parsed.timestamp()


def test_every_dashboard_panel_has_data_from_prometheus(observed) -> None:
    empty = []
    for title, expr in dashboard_queries():
        query = expr.replace("$namespace", ".*").replace("$job", ".*")
        if not observed.prometheus.query(query):
            empty.append((title, query))
    assert not empty, empty


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    binary = debian_binary("chromium", "chromium")
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--virtual-time-budget=20000", *args],
                          capture_output=True, text=True, timeout=180)


def test_the_report_opens_in_chromium_without_console_errors(cluster, observed) -> None:
    page = observed.workdir / "report" / "report.html"
    ok(shipyard_cli(cluster, "sweep", "report", "obs", "-o", str(page), "-n",
                    observed.namespace))
    assert "<script src" not in page.read_text()  # self-contained
    dom = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    assert dom.stdout.count("<svg") >= 4, "a chart did not render"
    for name in ("oracle__obs", "nop__obs", "rnd", "noreward", "nosuch"):
        assert name in dom.stdout, name
    first = json.loads((observed.workdir / "report" / "jobs" / "obs" / "result.json")
                       .read_text())["n_total_trials"]
    assert first == 3 * 2 * ATTEMPTS
    shot = Path(os.environ.get("SHIPYARD_REPORT_SCREENSHOT", page.with_suffix(".png")))
    chromium("--window-size=1300,2400", f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000


HARBOR_VIEW_CHECK = """
import json, sys, urllib.request
base, job = sys.argv[1], sys.argv[2]
def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return r.status, json.loads(r.read())
jobs = get("/api/jobs")[1]["items"]
mine = next(j for j in jobs if j["name"] == job)
trials = get(f"/api/jobs/{job}/trials?page_size=100")[1]["items"]
configs = [get(f"/api/jobs/{job}/trials/{t['name']}")[1]["config"] for t in trials]
print(json.dumps({"agents": mine["agents"], "datasets": mine["datasets"],
                  "config": get(f"/api/jobs/{job}/config")[0], "trials": len(trials),
                  "configs": sum(1 for c in configs if c and c.get("trial_name"))}))
"""


@pytest.mark.optin
def test_harbor_computes_the_same_statistics_and_its_viewer_opens_the_export(cluster,
                                                                           observed) -> None:
    python = harbor_python()
    job = sweep_json(cluster, observed)
    jobs = observed.workdir / "harbor-jobs"
    ok(shipyard_cli(cluster, "sweep", "results", "obs", "-o", str(jobs), "-n",
                    observed.namespace))
    order = [r["trial_name"] for r in job["trial_results"]]
    harbor = subprocess.run([python, str(ROOT / "tests" / "harbor_stats.py"),
                             str(jobs / "obs"), *order], capture_output=True, text=True,
                            timeout=300)
    assert harbor.returncode == 0, harbor.stderr[-3000:]
    theirs = json.loads(harbor.stdout)
    ours = job["stats"]
    for field in ("n_completed_trials", "n_errored_trials", "n_cancelled_trials",
                  "n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd"):
        assert theirs[field] == ours[field], field
    assert set(theirs["evals"]) == set(ours["evals"])
    for key, e in theirs["evals"].items():
        mine = ours["evals"][key]
        for field in ("n_trials", "n_errors", "metrics", "pass_at_k", "reward_stats",
                      "exception_stats"):
            assert e[field] == mine[field], (key, field, e[field], mine[field])

    # Harbor's viewer, as `harbor view` serves it
    with harbor_view(python, jobs) as base:
        seen = subprocess.run([python, "-c", HARBOR_VIEW_CHECK, base, "obs"],
                              capture_output=True, text=True, timeout=120)
        assert seen.returncode == 0, seen.stderr[-3000:]
        assert json.loads(seen.stdout) == {
            "agents": ["nop", "oracle"], "datasets": ["obs"], "config": 200,
            "trials": 3 * 2 * ATTEMPTS, "configs": 3 * 2 * ATTEMPTS}
        # the viewer's own app (its single-page client) renders a trial of the export
        missing = next(r["trial_name"] for r in job["trial_results"]
                       if r["task_name"] == "nosuch")
        page = chromium("--dump-dom", f"{base}/jobs/obs/trials/{missing}")
        assert missing in page.stdout and "TaskNotFoundError" in page.stdout


# ---------------------------------------------------------------- a pytest task's verifier reports

PYTEST_DOCKERFILE = """FROM python:3.12-slim
RUN pip install --no-cache-dir --retries 2 --timeout 30 pytest==8.4.2 pytest-json-ctrf==0.3.6
WORKDIR /app
"""
# As Harbor's own task template (`harbor tasks init`'s pytest tests): a CTRF report beside the
# reward; this one also keeps the tests' stderr apart (`-s`: not captured by pytest).
PYTEST_TEST_SH = """#!/bin/bash
if pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA -s \\
    2> /logs/verifier/test-stderr.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
echo "graded by pytest" >&2
# A grader's own files beside the reward (Harbor keeps the whole folder): kept, a folder not.
echo '{"graded": "by pytest"}' > /logs/verifier/grading.json
mkdir -p /logs/verifier/sub && echo deep > /logs/verifier/sub/deep.txt
"""
PYTEST_TESTS = """import sys
from pathlib import Path


def test_answer():
    print("checking the answer", file=sys.stderr)
    assert Path("/app/answer.txt").read_text().strip() == "42"


def test_always():
    assert True
"""


@pytest.fixture(scope="module")
def pytest_job(cluster, crds, operator, core_v1, custom_objects, tmp_path_factory
               ) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A Sweep of one pytest-graded task (its image built with pytest and pytest-json-ctrf),
    oracle and nop, exported with `sweep results -o`."""
    from kubernetes import client

    if not cluster.local:
        pytest.skip("builds the task's image with the local cluster's buildkitd")
    ns = f"{TEST_NAMESPACE_PREFIX}-ctrf-{uuid.uuid4().hex[:6]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=ns, labels={TEST_NAMESPACE_LABEL: "true"})))
    try:
        custom_objects.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "pyt"},
            "spec": {"source": {"inline": {"files": {
                "task.toml": '[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 120\n'
                             '[environment]\nbuild_timeout_sec = 600\nworkdir = "/app"\n',
                "instruction.md": "Write 42 to /app/answer.txt.\n",
                "environment/Dockerfile": PYTEST_DOCKERFILE,
                # a link planted where the verifier writes: never followed by the runner
                "solution/solve.sh": "#!/bin/bash\necho 42 > /app/answer.txt\n"
                                     "ln -s /etc/shadow /logs/verifier/planted.txt\n",
                "tests/test.sh": PYTEST_TEST_SH,
                "tests/test_outputs.py": PYTEST_TESTS}}}}})
        create_sweep(custom_objects, ns, "pyt", tasks={"names": ["pyt"]},
                     agents=[{"name": "oracle"}, {"name": "nop"}], attempts=1, parallelism=2)
        sweep = wait_sweep(custom_objects, ns, "pyt", lambda s: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (s.get("status") or {}).get("conditions") or []), timeout=900)
        jobs = tmp_path_factory.mktemp("ctrf") / "jobs"
        ok(shipyard_cli(cluster, "sweep", "results", "pyt", "-o", str(jobs), "-n", ns))
        yield jobs, sweep
    finally:
        core_v1.delete_namespace(ns)


def test_a_pytest_tasks_export_has_its_ctrf_report_and_stderr(pytest_job) -> None:
    jobs, sweep = pytest_job
    assert sweep["status"]["counts"]["completed"] == 2, sweep["status"]
    by_agent = {}
    for trial_dir in (p for p in (jobs / "pyt").iterdir() if p.is_dir()):
        result = json.loads((trial_dir / "result.json").read_text())
        by_agent[result["agent_info"]["name"]] = (trial_dir, result)
    assert set(by_agent) == {"oracle", "nop"}
    for agent, passed in (("oracle", 2), ("nop", 1)):
        trial_dir, result = by_agent[agent]
        assert result["verifier_result"]["rewards"] == {"reward": 1 if agent == "oracle" else 0}
        ctrf = json.loads((trial_dir / "verifier" / "ctrf.json").read_text())
        summary = ctrf["results"]["summary"]
        assert (summary["tests"], summary["passed"]) == (2, passed), summary
        assert {t["name"].rsplit("::", 1)[-1] for t in ctrf["results"]["tests"]} == {
            "test_answer", "test_always"}
        stderr = (trial_dir / "verifier" / "test-stderr.txt").read_text()
        stdout = (trial_dir / "verifier" / "test-stdout.txt").read_text()
        assert "passed" in stdout and "graded by pytest" in stdout
        assert stderr == "checking the answer\n"  # the tests' own stderr, apart
        assert "graded by pytest" not in stderr  # the file pytest's stderr went to, alone
        kept = {p.name for p in (trial_dir / "verifier").iterdir()}
        assert kept == {"ctrf.json", "test-stderr.txt", "test-stdout.txt", "reward.txt",
                        "grading.json"}, kept  # no link, no folder
        assert json.loads((trial_dir / "verifier" / "grading.json").read_text()) == {
            "graded": "by pytest"}


@pytest.mark.optin
def test_harbors_viewer_reads_the_exported_verifier_reports(pytest_job) -> None:
    """Harbor 0.25's models load the exported trials, and its viewer's verifier-output
    endpoint returns the CTRF report and stderr (as `harbor view` serves them)."""
    jobs, _ = pytest_job
    python = harbor_python()
    with harbor_view(python, jobs) as base:
        check = subprocess.run([python, "-c", HARBOR_REPORTS_CHECK, base, "pyt", str(jobs)],
                               capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stderr[-3000:]
        seen = json.loads(check.stdout)
        assert len(seen) == 2, seen
        for trial in seen.values():
            assert trial["ctrf_tests"] == 2, trial
            assert "checking the answer" in trial["stderr"] and "passed" in trial["stdout"]
            # the artifacts' manifest, read by Harbor's models and viewer: the empty
            # convention folder (the task declares no artifacts)
            assert trial["manifest"] == [{
                "source": "/logs/artifacts", "destination": "artifacts/logs/artifacts",
                "type": "directory", "status": "empty", "service": None, "exclude": []}], trial


HARBOR_REPORTS_CHECK = VIEWER_CLIENT + """
out = {}
for t in get(f"/api/jobs/{job}/trials?page_size=100")["items"]:
    name = t["name"]
    TrialResult.model_validate_json((jobs / job / name / "result.json").read_text())
    v = get(f"/api/jobs/{job}/trials/{name}/verifier-output")
    raw = json.loads((jobs / job / name / "artifacts" / "manifest.json").read_text())
    rows = [ArtifactManifestEntry.model_validate(e).model_dump(mode="json") for e in raw]
    assert rows == raw, (rows, raw)
    a = get(f"/api/jobs/{job}/trials/{name}/artifacts")
    out[name] = {"ctrf_tests": json.loads(v["ctrf"])["results"]["summary"]["tests"],
                 "stderr": v["stderr"], "stdout": v["stdout"], "manifest": a["manifest"]}
print(json.dumps(out))
"""
