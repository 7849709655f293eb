#!/usr/bin/env python3
"""N concurrent oracle trials of one trivial task: Shipyard, the floor and Harbor 0.25, one table.

    python bench/concurrent_trials.py [-n 30] [--arms shipyard,floor,harbor]
                                      [--image localhost/shipyard/debian:bookworm]

Uses the cluster of KUBECONFIG when SHIPYARD_USE_EXISTING_CLUSTER=1, else the local cluster
(`hack/localcluster/localcluster.py up`). Each arm runs in a namespace of its own
(`$SHIPYARD_TEST_NS_PREFIX-…`, else `bench-…`):

- shipyard: an operator from this checkout, serving only that namespace; N Trials created at once.
- floor: N bare pods of the same image doing the same work (write, check, reward), created at
  once: what the cluster itself costs.
- harbor: `harbor run -e ack -a oracle -n N -k N` on the same task and cluster (Harbor 0.25 in a
  venv of its own, bench/harbor_venv.py; skipped with a message where no Python >= 3.12 exists).

Requests are counted inside each client process (bench/apicount.py), by verb and resource, so
they are exact on a busy shared cluster; the apiserver's `apiserver_request_total` delta (every
client of the cluster) is printed beside them; leader election's Lease renewals are a cost per
second, printed apart. Also: execs, Events written (and the kubelet's probe-failure Events about
trial pods), Trial status writes, wall time (first create to last result), latency p50/p95,
node CPU seconds (the local cluster's machine: all of it, and the pods' cgroup), peak RSS, and
where each trial that did not finish stood. `--arms shipyard-noprobe` runs the operator without
the probe container (SHIPYARD_PROBE_IMAGE=none: a phase that outlasts its launch is waited for
by a `result` exec), to compare with the probe container, which `--agent-sleep` tasks get (their
timeouts are long); the trivial task's pods have no probe either way. `--arms
shipyard-sh,shipyard-go` runs the operator with runner.sh (SHIPYARD_RUNNER=sh) and with the
static Go runner (SHIPYARD_RUNNER_IMAGE: the local cluster's, hack/localcluster/runner_image.py)
side by side; every arm also counts the programs started in its trial pods (execve, with the
kernel's process events connector, bench/execcount.py; needs root).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from execcount import ExecCounter  # noqa: E402
from harbor_venv import ensure_harbor  # noqa: E402
from shipyard.plan.settings import LOCAL_PROBE_IMAGE  # noqa: E402

GROUP, VERSION = "shipyard.dev", "v1alpha1"
SOLVE = "#!/bin/sh\necho ok > /tmp/out\n"
TEST = ("#!/bin/sh\ngrep -q ok /tmp/out && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n")
FLOOR_WORK = "echo ok > /tmp/out && grep -q ok /tmp/out && echo 1 > /tmp/reward && cat /tmp/reward"
CREATORS = 16  # threads creating Trials / pods at once
QUEUE_ENV = {"SHIPYARD_UNSCHEDULABLE_GRACE_SEC": "3600"}


@dataclass
class Arm:
    name: str
    n: int
    ok: int = 0
    wall: float | None = None
    latencies: list[float] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)  # agent end → verifier start (--agent-sleep)
    requests: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)  # reason → count
    rss_mib: float | None = None
    apiserver: int | None = None  # apiserver_request_total delta, every client
    cpu: dict[str, float] | None = None  # CPU seconds on the node while the arm ran (local)
    operator_cpu: float | None = None  # the operator process's own CPU seconds meanwhile
    unfinished: list[str] = field(default_factory=list)  # where each unfinished trial stood
    stages: dict[str, list[float]] = field(default_factory=dict)  # see `stages`
    programs: int | None = None  # execve in the arm's pods (bench/execcount.py)
    programs_lost: int = 0  # execs whose process was gone before its cgroup was read
    note: str = ""
    skipped: str = ""

    def per_trial(self, value: float) -> float:
        return value / self.n

    @property
    def non_watch(self) -> int:
        """Requests for the trials: not watches, nor leader election's Lease renewals (a cost
        per second, not per trial: `lease requests/s`)."""
        return sum(v for k, v in self.requests.items()
                   if not k.startswith("watch ") and not k.endswith(" leases"))

    @property
    def leases(self) -> int:
        return sum(v for k, v in self.requests.items() if k.endswith(" leases"))

    def count(self, prefix: str) -> int:
        return sum(v for k, v in self.requests.items() if k == prefix)


def ensure_cluster() -> str:
    if os.environ.get("SHIPYARD_USE_EXISTING_CLUSTER") == "1":
        return os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
    subprocess.run([sys.executable, str(ROOT / "hack/localcluster/localcluster.py"), "up"],
                   check=True, stdout=subprocess.DEVNULL)
    return "/var/lib/shipyard-localcluster/kubeconfig"


def kubectl_path() -> str:
    local = sorted(Path.home().glob(".cache/shipyard/k8s-*/kubectl"))
    return str(local[-1]) if local else os.environ.get("KUBECTL", "kubectl")


def apply_crds(kubeconfig: str) -> None:
    subprocess.run([kubectl_path(), "--kubeconfig", kubeconfig, "apply", "-f",
                    str(ROOT / "crds")], check=True, stdout=subprocess.DEVNULL)


def task_files(image: str, harbor: bool = False, agent_sleep: float = 0) -> dict[str, str]:
    """The trivial task. With `agent_sleep`, the oracle sleeps that long (longer than the
    runner's launch grace: its end is then seen through the readiness probe and the pod watch)
    and the verifier reports, as the reward key `delay`, the seconds from the agent's end to
    its own start: the critical path from one phase's end to the next phase."""
    # Pods beyond what the node holds wait for the scheduler: a long start timeout (and the
    # operator's unschedulable grace, see QUEUE_ENV) lets them queue instead of failing.
    # A sleeping agent stands for a real one: its task's timeouts are long (its trial pods then
    # get the probe container, `render.pod.probe_image_for`).
    timeout = 600.0 if agent_sleep else 60.0
    toml = f'[agent]\ntimeout_sec = {timeout}\n[verifier]\ntimeout_sec = {timeout}\n' \
           f'[environment]\ndocker_image = "{image}"\nbuild_timeout_sec = 3600\n'
    if harbor:  # Harbor's ack pods need whole cpus and sizes (the bench overrides the requests)
        toml += "cpus = 1\nmemory_mb = 64\nstorage_mb = 64\n"
    solve, test = SOLVE, TEST
    if agent_sleep:
        solve = f"#!/bin/sh\nsleep {agent_sleep}\necho ok > /tmp/out\ndate +%s.%N > /tmp/end\n"
        test = ("#!/bin/sh\nnow=$(date +%s.%N)\nok=0; grep -q ok /tmp/out && ok=1\n"
                'python3 -c "import json; print(json.dumps({\'reward\': $ok, '
                '\'delay\': $now - $(cat /tmp/end)}))" > /logs/verifier/reward.json\n')
    return {"task.toml": toml, "instruction.md": "Write ok to /tmp/out.\n",
            "solution/solve.sh": solve, "tests/test.sh": test}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def namespace_name(kind: str) -> str:
    prefix = os.environ.get("SHIPYARD_TEST_NS_PREFIX") or "bench"
    return f"{prefix}-{kind}-{uuid.uuid4().hex[:6]}"


def settle(core: client.CoreV1Api, timeout: float = 180) -> None:
    """Until the namespaces of the arms before are gone (their pods torn down): each arm starts
    on a node that is not still tearing down the last one's pods."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = [ns.metadata.name for ns in core.list_namespace().items]
        prefix = (os.environ.get("SHIPYARD_TEST_NS_PREFIX") or "bench") + "-"
        if not any(n.startswith(prefix) for n in names):
            break
        time.sleep(2)
    quiet(deadline)


def quiet(deadline: float, busy_below: float = 0.25, window: float = 3.0) -> None:
    """Until the node's CPU was mostly idle over `window` seconds (a namespace is gone before
    its pods' teardown, or another run's, is over): an arm measured on a node still busy
    with the last one's leftovers would carry their cost."""
    if node_cpu() is None:
        return
    while time.monotonic() < deadline:
        before, began = node_cpu(), time.monotonic()
        time.sleep(window)
        after = node_cpu()
        if before and after and (after["node"] - before["node"]) / (
                (time.monotonic() - began) * (os.cpu_count() or 1)) < busy_below:
            return


def make_namespace(core: client.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name, "labels": {"shipyard.dev/bench": "1"}}})
    for _ in range(100):  # pods are refused until the default ServiceAccount exists
        try:
            core.read_namespaced_service_account("default", name)
            return
        except ApiException:
            time.sleep(0.2)


def apiserver_requests(kubeconfig: str) -> int | None:
    """The apiserver's request count so far (every client, watches included)."""
    try:
        text = subprocess.run([kubectl_path(), "--kubeconfig", kubeconfig, "get", "--raw",
                               "/metrics"], capture_output=True, text=True, check=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def node_cpu() -> dict[str, float] | None:
    """CPU seconds used so far on this machine (the local cluster's node): all of it (/proc/stat,
    every process: on a shared machine others' work too) and the pods' (the kubepods cgroup:
    containers and what execs and exec probes run in them). None for another cluster."""
    if os.environ.get("SHIPYARD_USE_EXISTING_CLUSTER") == "1":
        return None
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        ticks = os.sysconf("SC_CLK_TCK")
        busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4)) / ticks
    except (OSError, ValueError):
        return None
    out = {"node": busy, **{f"proc {k}": v for k, v in cpu_by_process().items()}}
    with contextlib.suppress(OSError, ValueError):  # cgroup v1, else v2
        v1 = Path("/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage")
        if v1.exists():
            out["pods"] = int(v1.read_text()) / 1e9
        else:
            for line in Path("/sys/fs/cgroup/kubepods.slice/cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    out["pods"] = int(line.split()[1]) / 1e6
    return out


PROCESS_GROUPS = {"kube-apiserver": "apiserver", "etcd": "etcd", "kubelet": "kubelet",
                  "containerd-shim": "shims+runc", "containerd": "containerd",
                  "runc": "shims+runc", "kube-router": "kube-router", "python3": "python",
                  "python": "python", "kube-controller": "controller-manager",
                  "kube-scheduler": "scheduler"}


def cpu_by_process() -> dict[str, float]:
    """CPU seconds so far by process group (`PROCESS_GROUPS`, by the start of the command
    name), each with its reaped children's (runc is reaped by its shim, so it counts there)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: Counter[str] = Counter()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        group = next((g for prefix, g in PROCESS_GROUPS.items() if comm.startswith(prefix)),
                     "other")
        out[group] += sum(int(v) for v in fields[11:15]) / ticks
    return dict(out)


def cpu_delta(before: dict[str, float] | None, after: dict[str, float] | None
              ) -> dict[str, float] | None:
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in after if k in before}


def where_unfinished(custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str,
                     done: dict[str, Any], limit: int = 20) -> list[str]:
    """For each trial that did not finish: its phase, running phase record, last condition and
    its pods' phase and readiness (a lost trial is a bug: this says where it stood)."""
    out: list[str] = []
    try:
        trials = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trials")["items"]
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
    except ApiException as e:
        return [f"could not list: {e.status} {e.reason}"]
    for t in trials:
        name = t["metadata"]["name"]
        if name in done:
            continue
        st = t.get("status") or {}
        running = [f"{r.get('name')}:{r.get('state')}{'(launched)' if r.get('launched') else ''}"
                   for r in st.get("phases") or [] if r.get("state") not in ("Succeeded",
                                                                           "Skipped")]
        cond = (st.get("conditions") or [{}])[-1]
        pod_states = []
        for pod_name in (st.get("podName"), st.get("verifierPodName")):
            pod = pods.get(pod_name) if pod_name else None
            if pod is not None:
                ready = {c.name: c.ready for c in pod.status.container_statuses or []}
                pod_states.append(f"{pod_name} {pod.status.phase} {ready}")
            elif pod_name:
                pod_states.append(f"{pod_name} absent")
        out.append(f"{name}: {st.get('phase')} {' '.join(running[:2])} "
                   f"[{cond.get('type')}={cond.get('status')} {cond.get('reason')}] "
                   f"{'; '.join(pod_states)}")
        if len(out) >= limit:
            break
    return out


def wait_ready(custom: client.CustomObjectsApi, namespace: str, task: str) -> None:
    """Until the operator has validated the Task (it is up and its start-up requests are done)."""
    for _ in range(300):
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", task)
        if any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or []):
            return
        time.sleep(0.2)
    raise TimeoutError(f"Task {namespace}/{task} did not become Ready")


def wait4(proc: subprocess.Popen, timeout: float) -> float | None:
    """Wait for a child and return its peak RSS in MiB."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = 0
            return usage.ru_maxrss / 1024
        time.sleep(0.1)
    proc.kill()
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_maxrss / 1024


def read_counts(path: Path) -> Counter[str]:
    try:
        return Counter(json.loads(path.read_text()))
    except (OSError, ValueError):
        return Counter()


def shipyard_events(core: client.CoreV1Api, namespace: str) -> Counter[str]:
    """Events about Trials written by the operator (any reporter but the kubelet & co), and the
    kubelet's probe failures about trial pods (each one an Event write, or a count bump)."""
    found: Counter[str] = Counter()
    for ev in core.list_namespaced_event(namespace).items:
        if ev.involved_object.kind == "Trial":
            found[ev.reason] += ev.count or 1
        elif ev.involved_object.kind == "Pod" and ev.reason == "Unhealthy":
            found["(kubelet) probe failed"] += ev.count or 1
    return found


def follow_until(list_fn: Callable, args: tuple, n: int, timeout: float,
                 done_of: Callable[[Any], tuple[str, bool] | None],
                 done: dict[str, tuple[float, bool]]) -> threading.Event:
    """List and watch objects in a thread (listing again whenever a watch ends, as watches do
    on a busy apiserver); `done_of(obj)` → (name, success) once an object is final."""
    finished = threading.Event()
    deadline = time.monotonic() + timeout

    def note(obj: Any) -> None:
        result = done_of(obj)
        if result is not None and result[0] not in done:
            done[result[0]] = (time.monotonic(), result[1])
            if len(done) >= n:
                finished.set()

    def run() -> None:
        while not finished.is_set() and time.monotonic() < deadline:
            try:
                listed = list_fn(*args)
                items = listed["items"] if isinstance(listed, dict) else listed.items
                version = (listed["metadata"]["resourceVersion"] if isinstance(listed, dict)
                           else listed.metadata.resource_version)
                for obj in items:
                    note(obj)
                w = watch.Watch()
                for event in w.stream(list_fn, *args, resource_version=version,
                                      timeout_seconds=max(1, int(deadline - time.monotonic()))):
                    note(event["object"])
                    if finished.is_set():
                        w.stop()
            except Exception as e:  # a broken watch: list again
                print(f"bench watch: {e}; listing again", file=sys.stderr)
                time.sleep(0.5)

    threading.Thread(target=run, daemon=True).start()
    return finished


def bench_namespace(kind: str) -> tuple[str, client.CoreV1Api, client.CustomObjectsApi, str]:
    """The cluster (CRDs applied from this checkout) and a fresh namespace of its own."""
    kubeconfig = ensure_cluster()
    apply_crds(kubeconfig)
    config.load_kube_config(kubeconfig)
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    namespace = namespace_name(kind)
    make_namespace(core, namespace)
    return kubeconfig, core, custom, namespace


def drop_finalizers(custom: client.CustomObjectsApi, namespace: str,
                    plurals: tuple[str, ...] = ("sweeps", "trials", "tasks")) -> None:
    """After the operator is gone: its finalizers off, so the namespace can go."""
    for plural in plurals:
        for obj in custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                        plural)["items"]:
            if obj["metadata"].get("finalizers"):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, obj["metadata"]["name"],
                    {"metadata": {"finalizers": None}})


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def process_cpu(pid: int) -> float | None:
    """A process's user + system CPU seconds so far (/proc/PID/stat); None when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_operator(kubeconfig: str, namespace: str) -> tuple[subprocess.Popen, Path]:
    """The operator of this checkout, serving only `namespace`; its log file."""
    log = Path(tempfile.mkdtemp()) / "operator.log"
    # Its Lease in its own namespace: two benches (or an installed operator) at once must not
    # wait for each other's default/shipyard-operator.
    env = dict(os.environ, KUBECONFIG=kubeconfig, PYTHONUNBUFFERED="1",
               SHIPYARD_LEADER_LEASE_NAMESPACE=namespace)
    with open(log, "wb") as out:
        operator = subprocess.Popen(
            [sys.executable, "-m", "shipyard", "operator", "--liveness", "", "--metrics-port",
             "0", "-n", namespace],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return operator, log


# ---------------------------------------------------------------- the arms


def pod_times(pod: Any, seen: dict[str, dict[str, float]]) -> None:
    """When each pod was first seen, first running (every container), first deleting."""
    at = time.monotonic()
    times = seen.setdefault(pod.metadata.name, {"created": at})
    statuses = (pod.status and pod.status.container_statuses) or []
    if statuses and all(cs.state and cs.state.running for cs in statuses):
        times.setdefault("running", at)
    if pod.metadata.deletion_timestamp:
        times.setdefault("deleting", at)
    return None


def stages(created: dict[str, float], pods: dict[str, dict[str, float]],
           done: dict[str, tuple[float, bool]]) -> dict[str, list[float]]:
    """Where a trial's time goes, from the watches: Trial created → its pod created → the pod
    running → the Trial finished (the execs and the writes) → its pod deleted (right after
    its end is written)."""
    out: dict[str, list[float]] = {"Trial -> pod created": [], "pod created -> running": [],
                                   "running -> finished": [], "finished -> pod deleted": []}
    for trial, began in created.items():
        pod = next((t for name, t in pods.items() if name.startswith(f"{trial}-")), None)
        if pod is None or trial not in done or "running" not in pod or "deleting" not in pod:
            continue
        marks = [began, pod["created"], pod["running"], done[trial][0], pod["deleting"]]
        for key, (a, b) in zip(out, pairwise(marks), strict=True):
            out[key].append(b - a)
    return out


def local_runner_image() -> str:
    hack = str(ROOT / "hack" / "localcluster")
    sys.path.insert(0, hack)
    try:
        import runner_image
    finally:
        sys.path.remove(hack)
    return runner_image.reference()


def run_shipyard(args, kubeconfig: str, core, custom, no_probe: bool = False,
                 runner: str | None = None) -> Arm:
    """The operator of this checkout; `no_probe`: without the probe container
    (SHIPYARD_PROBE_IMAGE=none); `runner`: `sh` (runner.sh) or `go` (the local runner image)."""
    arm = Arm("shipyard-noprobe" if no_probe else f"shipyard-{runner}" if runner else "shipyard",
              args.n)
    namespace = namespace_name("sy")
    make_namespace(core, namespace)
    work = Path(tempfile.mkdtemp(prefix="bench-shipyard-"))
    counts, log = work / "requests.json", work / "operator.log"
    env = dict(os.environ, KUBECONFIG=kubeconfig, PYTHONUNBUFFERED="1", **QUEUE_ENV)
    # Leader election as deployed, with a Lease of its own: another operator on the cluster
    # holding the default Lease would keep this one a standby.
    env["SHIPYARD_LEADER_LEASE_NAME"] = f"shipyard-bench-{namespace}"
    env["SHIPYARD_PROBE_IMAGE"] = "none" if no_probe else LOCAL_PROBE_IMAGE
    if runner is not None:
        env["SHIPYARD_RUNNER"] = runner
        env["SHIPYARD_RUNNER_IMAGE"] = local_runner_image()
    cmd = [sys.executable, str(BENCH / "apicount.py"), str(counts), "-m", "shipyard",
           "operator", "--liveness", "", "--metrics-port", str(args.metrics_port), "-n",
           namespace, *(["-v"] if args.verbose else [])]
    if args.profile:
        cmd = [sys.executable, "-m", "cProfile", "-o", str(work / "operator.prof"), *cmd[1:]]
    with open(log, "wb") as out:
        operator = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
    created: dict[str, float] = {}
    done: dict[str, tuple[float, bool]] = {}
    refused: list[str] = []
    try:
        time.sleep(3)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "trivial"},
            "spec": {"source": {"inline": {"files": task_files(
                args.image, agent_sleep=args.agent_sleep)}}}})
        wait_ready(custom, namespace, "trivial")
        time.sleep(1.5)  # the counts file is written every second
        before_requests = read_counts(counts)

        def done_of(trial: dict) -> tuple[str, bool] | None:
            status = trial.get("status") or {}
            if status.get("phase") in ("Completed", "Failed"):
                if "Extra inputs" in str((status.get("error") or {}).get("message")):
                    refused.append(trial["metadata"]["name"])
                delay = (status.get("rewards") or {}).get("delay")
                if delay is not None and trial["metadata"]["name"] not in done:
                    arm.delays.append(delay)
                return (trial["metadata"]["name"],
                        status["phase"] == "Completed" and status.get("reward") == 1)
            return None

        finished = follow_until(custom.list_namespaced_custom_object,
                                (GROUP, VERSION, namespace, "trials"), args.n, args.timeout,
                                done_of, done)
        pods: dict[str, dict[str, float]] = {}
        uids: set[str] = set()

        def seen_pod(pod: Any) -> None:
            uids.add(pod.metadata.uid)
            return pod_times(pod, pods)

        follow_until(core.list_namespaced_pod, (namespace,), 1 << 30, args.timeout,
                     seen_pod, {})
        counter = ExecCounter() if os.geteuid() == 0 else None
        if counter is not None:
            counter.start()
        # CRDs are cluster-wide: on a shared cluster another checkout may have applied its own
        # since (a field it defaults would make this operator refuse the Trials).
        apply_crds(kubeconfig)
        time.sleep(0.5)
        before_api = apiserver_requests(kubeconfig)
        before_cpu = node_cpu()
        before_operator = process_cpu(operator.pid)
        began = time.monotonic()

        def create(i: int) -> None:
            name = f"t{i:04d}"
            created[name] = time.monotonic()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trials", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial", "metadata": {"name": name},
                "spec": {"taskRef": {"name": "trivial"}, "agent": {"name": "oracle"}}})

        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, range(args.n)))
        if not finished.wait(args.timeout):
            arm.note = f"only {len(done)} of {args.n} finished in {args.timeout:.0f}s"
            arm.unfinished = where_unfinished(custom, core, namespace, done)
        arm.cpu = cpu_delta(before_cpu, node_cpu())
        after_operator = process_cpu(operator.pid)
        if before_operator is not None and after_operator is not None:
            arm.operator_cpu = after_operator - before_operator
        arm.wall = max((t for t, _ in done.values()), default=time.monotonic()) - began
        time.sleep(1.5)  # the operator's last requests land in the counts file
        if counter is not None:
            counter.stop()
            arm.programs, arm.programs_lost = counter.programs(uids), counter.lost
        after_api = apiserver_requests(kubeconfig)
        if before_api is not None and after_api is not None:
            arm.apiserver = after_api - before_api
        arm.events = shipyard_events(core, namespace)
    finally:
        operator.send_signal(signal.SIGTERM)
        arm.rss_mib = wait4(operator, 30)
        core.delete_namespace(namespace)
    total = read_counts(counts)
    arm.requests = total - before_requests
    for key in [k for k in total if k.startswith("watch ")]:
        arm.requests[key] = total[key]  # shared watches: the whole run's
    arm.latencies = [done[n][0] - created[n] for n in done if n in created]
    arm.stages = stages(created, pods, done)
    arm.ok = sum(1 for _, ok in done.values() if ok)
    if refused:
        arm.note += (f" {len(refused)} trials refused as TrialInvalid for a field this checkout"
                     " does not know: another checkout applied its CRDs meanwhile (shared"
                     " cluster); run again.")
    pools = re.findall(r"\w+ thread pool: .*", log.read_text(errors="replace"))
    arm.note = (arm.note + "".join(f" {p};" for p in pools) + f" operator log {log}").strip()
    return arm


def run_floor(args, kubeconfig: str, core) -> Arm:
    arm = Arm("floor (bare pods)", args.n)
    namespace = namespace_name("fl")
    make_namespace(core, namespace)
    created: dict[str, float] = {}
    done: dict[str, tuple[float, bool]] = {}
    try:
        def done_of(pod) -> tuple[str, bool] | None:
            if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                return pod.metadata.name, pod.status.phase == "Succeeded"
            return None

        finished = follow_until(core.list_namespaced_pod, (namespace,), args.n, args.timeout,
                                done_of, done)
        time.sleep(0.5)
        before_api = apiserver_requests(kubeconfig)
        before_cpu = node_cpu()
        began = time.monotonic()

        def create(i: int) -> None:
            name = f"p{i:04d}"
            created[name] = time.monotonic()
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                         "enableServiceLinks": False, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": args.image,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["/bin/sh", "-c", FLOOR_WORK]}]}})

        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, range(args.n)))
        if not finished.wait(args.timeout):
            arm.note = f"only {len(done)} of {args.n} finished in {args.timeout:.0f}s"
        arm.cpu = cpu_delta(before_cpu, node_cpu())
        arm.wall = max((t for t, _ in done.values()), default=time.monotonic()) - began
        after_api = apiserver_requests(kubeconfig)
        if before_api is not None and after_api is not None:
            arm.apiserver = after_api - before_api
    finally:
        core.delete_namespace(namespace)
    arm.requests = Counter({"create pods": args.n, "watch pods": 1})
    arm.latencies = [done[n][0] - created[n] for n in done if n in created]
    arm.ok = sum(1 for _, ok in done.values() if ok)
    return arm


def run_harbor(args, kubeconfig: str, core) -> Arm:
    arm = Arm("harbor 0.25 (ack)", args.n)
    python, why = ensure_harbor()
    if python is None:
        arm.skipped = f"Harbor arm skipped: {why}"
        return arm
    namespace = namespace_name("hb")
    make_namespace(core, namespace)
    work = Path(tempfile.mkdtemp(prefix="bench-harbor-"))
    task = work / "trivial"
    for path, text in task_files(args.image, harbor=True,
                                 agent_sleep=args.agent_sleep).items():
        (task / path).parent.mkdir(parents=True, exist_ok=True)
        (task / path).write_text(text)
        (task / path).chmod(0o755 if path.endswith(".sh") else 0o644)
    (task / "environment").mkdir(exist_ok=True)
    (task / "environment" / "Dockerfile").write_text(f"FROM {args.image}\n")
    overrides = {"spec": {"containers": [{"imagePullPolicy": "IfNotPresent", "resources": {
        "requests": {"cpu": "10m", "memory": "16Mi", "ephemeral-storage": "16Mi"}}}]}}
    counts, log = work / "requests.json", work / "harbor.log"
    cmd = [str(python), str(BENCH / "apicount.py"), str(counts), "-m", "harbor.cli.main",
           "run", "-p", str(task), "-a", "oracle", "-e", "ack", "-n", str(args.n),
           "-k", str(args.n), "-o", str(work / "jobs"), "-y", "-q",
           "--ek", f"namespace={namespace}", "--ek", f"kubeconfig={kubeconfig}",
           "--ek", f"pod_overrides={json.dumps(overrides)}"]
    env = dict(os.environ, KUBECONFIG=kubeconfig, LITELLM_LOCAL_MODEL_COST_MAP="True",
               PYTHONUNBUFFERED="1")
    before_api = apiserver_requests(kubeconfig)
    before_cpu = node_cpu()
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        arm.rss_mib = wait4(proc, args.timeout + 120)
        arm.cpu = cpu_delta(before_cpu, node_cpu())  # includes Harbor's start-up
        after_api = apiserver_requests(kubeconfig)
        if before_api is not None and after_api is not None:
            arm.apiserver = after_api - before_api  # includes Harbor's start-up
    finally:
        core.delete_namespace(namespace)
    starts, ends = [], []
    for result in (work / "jobs").glob("*/*/result.json"):
        trial = json.loads(result.read_text())
        started, finished = trial.get("started_at"), trial.get("finished_at")
        if not (started and finished):
            continue
        s = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
        f = datetime.fromisoformat(finished.replace("Z", "+00:00")).timestamp()
        starts.append(s)
        ends.append(f)
        arm.latencies.append(f - s)
        rewards = ((trial.get("verifier_result") or {}).get("rewards") or {})
        arm.ok += rewards.get("reward") == 1
        if rewards.get("delay") is not None:
            arm.delays.append(rewards["delay"])
    if starts:
        arm.wall = max(ends) - min(starts)
    arm.requests = read_counts(counts)
    arm.note = f"harbor log {log}; wall = first trial start to last trial end"
    return arm


# ---------------------------------------------------------------- the table

TARGETS = "targets per single-step public trial: requests <= 12, execs <= 3, Events <= 4; " \
          "wall <= 0.5x Harbor and <= 1.5x the floor"


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def table(arms: list[Arm]) -> str:
    ran = [a for a in arms if not a.skipped]
    rows: list[tuple[str, list[str]]] = [
        ("trials with reward 1", [f"{a.ok}/{a.n}" for a in ran]),
        ("wall time (s)", [fmt(a.wall) for a in ran]),
        ("trials/s", [fmt(a.n / a.wall if a.wall else None, ".2f") for a in ran]),
        ("latency p50 (s)", [fmt(statistics.median(a.latencies) if a.latencies else None)
                             for a in ran]),
        ("latency p95 (s)", [fmt(percentile(a.latencies, 95) if a.latencies else None)
                             for a in ran]),
        ("agent end -> verifier start p50/p95 (s)",
         [f"{fmt(statistics.median(a.delays), '.2f')}/{fmt(percentile(a.delays, 95), '.2f')}"
          if a.delays else "-" for a in ran]),
        ("requests/trial (no watches, no Leases)", [fmt(a.per_trial(a.non_watch)) for a in ran]),
        ("lease requests/s (leader election)",
         [fmt(a.leases / a.wall if a.wall else None, ".2f") for a in ran]),
        ("watch requests (all)", [str(sum(v for k, v in a.requests.items()
                                          if k.startswith("watch "))) for a in ran]),
        ("execs/trial", [fmt(a.per_trial(a.count("create pods/exec"))) for a in ran]),
        ("Events/trial (written)", [fmt(a.per_trial(a.count("create events")
                                                    + a.count("patch events"))) for a in ran]),
        ("Trial status writes/trial", [fmt(a.per_trial(a.count("patch trials/status")))
                                       for a in ran]),
        ("programs started in its pods/trial", [fmt(a.per_trial(a.programs))
                                                if a.programs is not None else "-"
                                                for a in ran]),
        ("node CPU s/trial (all / pods)",
         [f"{a.per_trial(a.cpu['node']):.2f}/{a.per_trial(a.cpu.get('pods', 0)):.2f}"
          if a.cpu else "-" for a in ran]),
        ("operator CPU s/trial", [fmt(a.per_trial(a.operator_cpu)
                                     if a.operator_cpu is not None else None, ".3f")
                                     for a in ran]),
        ("peak RSS of the client (MiB)", [fmt(a.rss_mib, ".0f") for a in ran]),
        ("apiserver requests/trial (all clients)",
         [fmt(a.per_trial(a.apiserver) if a.apiserver is not None else None) for a in ran]),
    ]
    width = max(len(r[0]) for r in rows) + 2
    cols = [max(len(a.name), 8) + 2 for a in ran]
    lines = ["".ljust(width) + "".join(a.name.rjust(c) for a, c in zip(ran, cols, strict=True))]
    for label, values in rows:
        lines.append(label.ljust(width)
                     + "".join(v.rjust(c) for v, c in zip(values, cols, strict=True)))
    lines.append("")
    for a in ran:
        lines.append(f"{a.name}: requests per trial by verb and resource")
        for key, value in sorted(a.requests.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {key:<40} {value / a.n:7.2f}  ({value})")
        if any(a.stages.values()):
            lines.append("    where the time goes, p50/p95 s: " + ", ".join(
                f"{k} {statistics.median(v):.1f}/{percentile(v, 95):.1f}"
                for k, v in a.stages.items() if v))
        if a.cpu:
            lines.append("    node CPU s/trial by process: " + ", ".join(
                f"{k[5:]} {v / a.n:.2f}" for k, v in sorted(a.cpu.items(), key=lambda kv: -kv[1])
                if k.startswith("proc ") and v >= 0.01 * a.n))
        if a.events:
            lines.append("    Events by reason: " + ", ".join(
                f"{r} {c / a.n:.2f}" for r, c in sorted(a.events.items(), key=lambda kv: -kv[1])))
        if a.programs_lost:
            lines.append(f"    ({a.programs_lost} execs on the node could not be attributed: "
                         "their process was gone before its cgroup was read)")
        if a.note:
            lines.append(f"    ({a.note})")
        for line in a.unfinished:
            lines.append(f"    unfinished {line}")
    for a in arms:
        if a.skipped:
            lines.append(a.skipped)
    return "\n".join(lines)


def verdict(arms: list[Arm]) -> str:
    by = {a.name.split()[0]: a for a in arms if not a.skipped}
    s = by.get("shipyard")
    if s is None:
        return TARGETS
    out = [TARGETS]
    out.append(f"shipyard: requests {s.per_trial(s.non_watch):.1f}, execs "
               f"{s.per_trial(s.count('create pods/exec')):.1f}, Events "
               f"{s.per_trial(s.count('create events') + s.count('patch events')):.1f}")
    for other, factor in (("floor", 1.5), ("harbor", 0.5)):
        o = by.get(other)
        if o is not None and o.wall and s.wall:
            out.append(f"shipyard wall / {other} wall = {s.wall / o.wall:.2f} "
                       f"(target <= {factor})")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30, help="concurrent trials (default 30)")
    parser.add_argument("--image", default="localhost/shipyard/debian:bookworm",
                        help="the task's image (Harbor's exec needs bash: debian, not busybox)")
    parser.add_argument("--arms", default="shipyard,floor,harbor",
                        help="any of shipyard, shipyard-noprobe (no probe container), "
                        "shipyard-sh, shipyard-go (runner.sh, the Go runner), floor, harbor")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--profile", action="store_true",
                        help="run the operator under cProfile (operator.prof beside its log)")
    parser.add_argument("--agent-sleep", type=float, default=0,
                        help="the oracle sleeps this long; rewards carry the phase-end delay")
    parser.add_argument("--verbose", action="store_true", help="the operator's debug log")
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="the shipyard arm's operator /metrics port: 0 (default) a free "
                        "port, as deployed (metrics on); -1 off, to measure what they cost")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    kubeconfig = ensure_cluster()
    apply_crds(kubeconfig)
    config.load_kube_config(kubeconfig)
    api = client.ApiClient()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    arms: list[Arm] = []
    for name in [a.strip() for a in args.arms.split(",") if a.strip()]:
        settle(core)
        print(f"== {name}: {args.n} trials (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
        if name == "shipyard":
            arms.append(run_shipyard(args, kubeconfig, core, custom))
        elif name == "shipyard-noprobe":
            arms.append(run_shipyard(args, kubeconfig, core, custom, no_probe=True))
        elif name in ("shipyard-sh", "shipyard-go"):
            arms.append(run_shipyard(args, kubeconfig, core, custom,
                                     runner=name.removeprefix("shipyard-")))
        elif name == "floor":
            arms.append(run_floor(args, kubeconfig, core))
        elif name == "harbor":
            arms.append(run_harbor(args, kubeconfig, core))
        else:
            parser.error(f"unknown arm {name}")
    print(f"N = {args.n}, image {args.image}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
          f"bench peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(table(arms))
    print(verdict(arms))
    if args.json:
        Path(args.json).write_text(json.dumps([{
            "name": a.name, "n": a.n, "ok": a.ok, "wall": a.wall, "latencies": a.latencies,
            "requests": dict(a.requests), "events": dict(a.events), "rss_mib": a.rss_mib,
            "delays": a.delays, "cpu": a.cpu, "unfinished": a.unfinished,
            "apiserver": a.apiserver, "skipped": a.skipped} for a in arms], indent=1))
    shipyard = next((a for a in arms if a.name == "shipyard"), None)
    return 0 if shipyard is None or shipyard.ok == shipyard.n else 1


if __name__ == "__main__":
    sys.exit(main())
