#!/usr/bin/env python3
"""Chaos during N concurrent trials: the operator and the cluster's parts crashed; figures.

The operator is SIGKILLed at random moments and, with `--arms`, the apiserver, etcd and the
kubelet are crashed too and trial pods evicted.

    python bench/chaos.py [-n 100] [--kill-every 5 15] [--seed S] [--new-identity]
                          [--arms operator apiserver etcd kubelet eviction]
                          [--restart-every 40 80] [--exec-probe]

Uses the cluster of KUBECONFIG when SHIPYARD_USE_EXISTING_CLUSTER=1, else the local cluster.
One namespace (`$SHIPYARD_TEST_NS_PREFIX-chaos-…`, else `bench-chaos-…`) holds the Task, the
Trials and the operator's Lease. The operator (this checkout, leader-elected as in production)
serves only that namespace; its trial pods get the probe container (the local cluster's
busybox) unless `--exec-probe`. The arms (`--arms`, default `operator`):

- operator: every `--kill-every` seconds (uniformly random between the two bounds) its process
  group is SIGKILLed and a new one started at once. With a fixed identity (the default) the new
  process renews the dead one's Lease at once, as a restarted container in the same pod would;
  `--new-identity` models a replaced pod: it waits for the Lease to expire.
- apiserver, etcd, kubelet: every `--restart-every` seconds the next of them (in turn) is
  SIGKILLed and started again by `hack/localcluster/localcluster.py restart NAME --kill` (the
  local cluster only; the bench must run as root). Whatever the arms, an operator that exits by
  itself (e.g. 3: it could not renew its Lease while the apiserver was down) is started again,
  as its pod's restart policy would, and counted.
- eviction (in the same turn as the restarts): the kubelet evicts a running trial pod. The
  task then declares `storage_mb` and one random running environment pod gets a file larger
  than that written into it by an exec: the kubelet's eviction manager evicts it (status
  Failed, reason Evicted), exactly as under node pressure, without starving the shared node.
  Its trial must end `PodLost` and, as `--retries` (default 1 with this arm) allows, be retried
  and rewarded.

The agent (`command`) and the verifier each append a line to a file in the environment pod;
the verifier reports both counts in reward.json. Printed: trials, kills, restarts (and how
long each component took to serve again), evictions, lost (not finished after `--timeout`
seconds of chaos and then `--grace` seconds without), finished during the chaos, duplicated
phases (a side effect seen twice in one attempt, or a phase recorded twice), retried trials
with the reasons of their failed attempts, failed (finished without reward 1, with their
reasons), wall time, and trials whose AgentStarted or VerifierStarted Event was posted more
often than they had attempts (or, rewarded, never: an Event lost with a killed operator).
Exit status 0 only with no lost, no duplicated and no failed trial.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from urllib3.exceptions import HTTPError

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from concurrent_trials import (  # noqa: E402
    CREATORS,
    GROUP,
    QUEUE_ENV,
    ROOT,
    VERSION,
    apply_crds,
    ensure_cluster,
    follow_until,
    make_namespace,
    namespace_name,
    wait_ready,
)
from shipyard.plan.settings import LOCAL_PROBE_IMAGE  # noqa: E402

LOCALCLUSTER = ROOT / "hack" / "localcluster" / "localcluster.py"
LOCAL_KUBECONFIG = Path(os.environ.get("SHIPYARD_LOCALCLUSTER_DIR",
                                       "/var/lib/shipyard-localcluster")) / "kubeconfig"
AGENT = "echo run >> /app/agent-runs; sleep {sleep}"
TEST_SH = (
    "#!/bin/bash\n"
    "echo run >> /app/verifier-runs\n"
    "a=$(wc -l < /app/agent-runs); v=$(wc -l < /app/verifier-runs)\n"
    'r=0; [ "$a" -eq 1 ] && [ "$v" -eq 1 ] && r=1\n'
    'printf \'{"reward": %d, "agent_runs": %d, "verifier_runs": %d}\' "$r" "$a" "$v"'
    " > /logs/verifier/reward.json\n"
)
STARTED = ("AgentStarted", "VerifierStarted")
COMPONENTS = {"apiserver": "kube-apiserver", "etcd": "etcd", "kubelet": "kubelet"}
ARMS = ("operator", *COMPONENTS, "eviction")
STORAGE_MB = 64  # the task's storage_mb with the eviction arm; the fill writes twice that


def task_files(image: str, storage_mb: int | None = None) -> dict[str, str]:
    storage = f"storage_mb = {storage_mb}\n" if storage_mb else ""
    return {
        "task.toml": ('schema_version = "1.4"\n[agent]\ntimeout_sec = 300\n'
                      "[verifier]\ntimeout_sec = 120\n"
                      f'[environment]\ndocker_image = "{image}"\nworkdir = "/app"\n'
                      f"build_timeout_sec = 3600\n{storage}"),
        "instruction.md": "Append a line to /app/agent-runs.\n",
        "tests/test.sh": TEST_SH,
    }


class Operator:
    """The operator process: started, SIGKILLed (its whole group), started again; started
    again too when it exits by itself, as its pod's restart policy would."""

    def __init__(self, namespace: str, kubeconfig: str, log: Path, new_identity: bool,
                 probe_image: str) -> None:
        self.namespace, self.log, self.new_identity = namespace, log, new_identity
        self.env = dict(os.environ, KUBECONFIG=kubeconfig, PYTHONUNBUFFERED="1", **QUEUE_ENV,
                        SHIPYARD_LEADER_LEASE_NAMESPACE=namespace,
                        SHIPYARD_PROBE_IMAGE=probe_image)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.exits: Counter[int] = Counter()  # exit status → times it exited by itself
        self.lock = threading.Lock()  # no restart once the bench stops it

    def start(self) -> None:
        self.starts += 1
        env = dict(self.env)
        if not self.new_identity:
            env["SHIPYARD_LEADER_IDENTITY"] = "chaos-operator"
        with open(self.log, "ab") as out:
            out.write(f"===== start {self.starts} at {time.time():.3f}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "shipyard", "operator", "--liveness", "",
                 "-n", self.namespace],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def supervise(self) -> None:
        """Start it again if it exited by itself (not killed by the bench)."""
        if self.proc is not None and self.proc.poll() is not None:
            self.exits[self.proc.returncode] += 1
            self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class Chaos:
    """The arms on their schedules, in one thread: operator kills every `kill_every`; the
    cluster arms (restarts, evictions) in turn every `restart_every`."""

    def __init__(self, operator: Operator, arms: list[str], kill_every: tuple[float, float],
                 restart_every: tuple[float, float], rng: random.Random,
                 core: client.CoreV1Api, namespace: str) -> None:
        self.operator, self.rng, self.core, self.namespace = operator, rng, core, namespace
        self.kill_every, self.restart_every = kill_every, restart_every
        self.cluster_arms = [a for a in arms if a != "operator"]
        self.kills_on = "operator" in arms
        self.kills: list[float] = []
        self.restarts: list[dict[str, Any]] = []  # {"arm", "at", "seconds" | "error"}
        self.evictions: list[dict[str, Any]] = []  # {"pod", "at"} | {"error"}
        self.done = threading.Event()

    def run(self) -> None:
        now = time.monotonic()
        next_kill = now + self.rng.uniform(*self.kill_every)
        next_restart = now + self.rng.uniform(*self.restart_every)
        turn = 0
        while not self.done.wait(0.5):
            with self.operator.lock:
                if self.done.is_set():
                    return
                self.operator.supervise()
                if self.kills_on and time.monotonic() >= next_kill:
                    self.operator.kill()
                    self.kills.append(time.monotonic())
                    self.operator.start()
                    next_kill = time.monotonic() + self.rng.uniform(*self.kill_every)
            if self.cluster_arms and time.monotonic() >= next_restart:
                arm = self.cluster_arms[turn % len(self.cluster_arms)]
                turn += 1
                if arm == "eviction":
                    self.evict()
                else:
                    self.restart(arm)
                next_restart = time.monotonic() + self.rng.uniform(*self.restart_every)

    def restart(self, arm: str) -> None:
        began = time.monotonic()
        print(f"chaos: crashing {COMPONENTS[arm]}", file=sys.stderr, flush=True)
        run = subprocess.run([sys.executable, str(LOCALCLUSTER), "restart", COMPONENTS[arm],
                              "--kill"], capture_output=True, text=True, timeout=300,
                             stdin=subprocess.DEVNULL)
        entry: dict[str, Any] = {"arm": arm, "at": began,
                                 "seconds": round(time.monotonic() - began, 1)}
        if run.returncode != 0:
            entry["error"] = (run.stderr or run.stdout).strip()[-500:]
        print(f"chaos: {COMPONENTS[arm]} back after {entry['seconds']}s"
              + (f" ({entry['error']})" if "error" in entry else ""), file=sys.stderr, flush=True)
        self.restarts.append(entry)

    def evict(self) -> None:
        """Fill a random running environment pod past its ephemeral-storage limit (the
        trial's first attempt only, so that its retry can succeed)."""
        try:
            pods = self.core.list_namespaced_pod(self.namespace).items
        except (ApiException, HTTPError, OSError) as e:
            self.evictions.append({"error": f"listing pods: {e}"})
            return
        done = {e.get("pod") for e in self.evictions}
        # Running, not ready: a trial pod is ready between its phases only (the runner's probe).
        candidates = [p.metadata.name for p in pods
                      if p.status.phase == "Running" and p.metadata.name not in done
                      and p.metadata.name.endswith("-env")
                      and any(c.name == "main" and c.state.running for c in
                              p.status.container_statuses or [])]
        if not candidates:
            self.evictions.append({"error": "no running first-attempt pod to evict"})
            return
        pod = self.rng.choice(sorted(candidates))
        fill = f"head -c {2 * STORAGE_MB}M /dev/zero > /var/tmp/chaos-fill; echo filled"
        # A client of its own: `stream` swaps its client's request function while it runs.
        core = client.CoreV1Api(client.ApiClient())
        try:
            out = stream(core.connect_get_namespaced_pod_exec, pod, self.namespace,
                         container="main", command=["/bin/sh", "-c", fill], stderr=True,
                         stdin=False, stdout=True, tty=False, _request_timeout=60)
        except (ApiException, HTTPError, OSError) as e:
            out = f"exec failed: {e}"
        print(f"chaos: filled {pod}: {out.strip()}", file=sys.stderr, flush=True)
        self.evictions.append({"pod": pod, "at": time.monotonic(), "exec": out.strip()[-200:]})


def examine(trial: dict[str, Any], events: Counter[tuple[str, str]]) -> dict[str, Any]:
    status = trial.get("status") or {}
    name = trial["metadata"]["name"]
    rewards = status.get("rewards") or {}
    phases = Counter(p.get("name") for p in status.get("phases") or [])
    attempts = status.get("attempt") or 1
    duplicated, repeated = [], []
    for key in ("agent_runs", "verifier_runs"):
        if (rewards.get(key) or 0) > 1:
            duplicated.append(f"{key}={rewards[key]}")
    for phase in ("agent", "verifier"):
        if phases[phase] > 1:
            duplicated.append(f"{phases[phase]} {phase} records")
    for reason in STARTED:
        if events[(name, reason)] > attempts:
            repeated.append(f"{events[(name, reason)]} {reason}")
    ok = status.get("phase") == "Completed" and status.get("reward") == 1
    missing = [reason for reason in STARTED if ok and not events[(name, reason)]]
    error = status.get("error") or {}
    return {"name": name, "phase": status.get("phase"), "ok": ok, "duplicated": duplicated,
            "repeated_events": repeated, "missing_events": missing, "attempts": attempts,
            "retried_because": [f"{a.get('reason')}: {(a.get('message') or '')[:160]}"
                                for a in status.get("attempts") or []],
            "why": f"{error.get('type')}: {error.get('message', '')[:160]}" if error else
            f"rewards {rewards}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="concurrent trials (default 100)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=["operator"],
                        help="what is crashed (default: operator)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(5.0, 15.0),
                        metavar=("MIN", "MAX"), help="seconds between kills (default 5 15)")
    parser.add_argument("--restart-every", type=float, nargs=2, default=(40.0, 80.0),
                        metavar=("MIN", "MAX"),
                        help="seconds between two cluster arms' turns (default 40 80)")
    parser.add_argument("--agent-sleep", type=float, default=5,
                        help="the agent sleeps this long after its side effect (default 5)")
    parser.add_argument("--retries", type=int, default=None,
                        help="the Trials' spec.retries (default 1 with the eviction arm, else 0)")
    parser.add_argument("--image", default="localhost/shipyard/debian:bookworm")
    parser.add_argument("--timeout", type=float, default=1500,
                        help="seconds of chaos at most (it stops when every trial finished)")
    parser.add_argument("--grace", type=float, default=180,
                        help="then seconds without chaos before unfinished trials count lost")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--new-identity", action="store_true",
                        help="each restart is a new pod: it waits for the Lease to expire")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--no-probe-container", action="store_true",
                        help="no probe container (SHIPYARD_PROBE_IMAGE=none): a phase that "
                             "outlasts its launch is waited for by a `result` exec")
    args = parser.parse_args()
    kubeconfig = ensure_cluster()
    cluster_arms = [a for a in args.arms if a in COMPONENTS]
    if cluster_arms and (Path(kubeconfig).resolve() != LOCAL_KUBECONFIG.resolve()
                         or os.geteuid() != 0):
        parser.error(f"--arms {' '.join(cluster_arms)} restart the local cluster's components "
                     f"(localcluster.py restart): run as root, KUBECONFIG={LOCAL_KUBECONFIG}")
    retries = args.retries if args.retries is not None else int("eviction" in args.arms)
    # A SIGTERM (e.g. `timeout`) still stops the operator it started (in `finally`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)

    apply_crds(kubeconfig)
    config.load_kube_config(kubeconfig)
    api = client.ApiClient()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = namespace_name("chaos")
    make_namespace(core, namespace)
    log = Path(tempfile.mkdtemp(prefix="bench-chaos-")) / "operator.log"
    operator = Operator(namespace, kubeconfig, log, args.new_identity,
                        "none" if args.no_probe_container else LOCAL_PROBE_IMAGE)
    chaos = Chaos(operator, args.arms, tuple(args.kill_every), tuple(args.restart_every), rng,
                  core, namespace)
    finished: dict[str, tuple[float, bool]] = {}
    print(f"== chaos: {args.n} trials in {namespace}, arms {' '.join(args.arms)}, kills every "
          f"{args.kill_every[0]:g}-{args.kill_every[1]:g}s, cluster arms every "
          f"{args.restart_every[0]:g}-{args.restart_every[1]:g}s, retries {retries}, seed {seed},"
          f" operator log {log}", file=sys.stderr)
    try:
        operator.start()
        storage = STORAGE_MB if "eviction" in args.arms else None
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "chaos"},
            "spec": {"source": {"inline": {"files": task_files(args.image, storage)}}}})
        wait_ready(custom, namespace, "chaos")
        all_done = follow_until(
            custom.list_namespaced_custom_object, (GROUP, VERSION, namespace, "trials"), args.n,
            args.timeout + args.grace,
            lambda t: (t["metadata"]["name"], True)
            if (t.get("status") or {}).get("phase") in ("Completed", "Failed") else None,
            finished)
        began = time.monotonic()
        agent = {"name": "command", "command": AGENT.format(sleep=args.agent_sleep)}

        def create(i: int) -> None:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial",
                    "metadata": {"name": f"c{i:04d}"},
                    "spec": {"taskRef": {"name": "chaos"}, "agent": agent,
                             **({"retries": retries} if retries else {})}}
            for attempt in range(60):  # the apiserver may be restarting
                try:
                    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trials",
                                                           body)
                    return
                except ApiException as e:
                    if e.status == 409:
                        return
                    if attempt == 59 or e.status not in (0, 429, 500, 503, 504):
                        raise
                except (HTTPError, OSError):
                    if attempt == 59:
                        raise
                time.sleep(2)

        killer = threading.Thread(target=chaos.run, daemon=True)
        killer.start()
        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, range(args.n)))
        all_done.wait(args.timeout)
        chaos.done.set()
        killer.join(330)  # a restart under way ends first
        during = len(finished)
        # The chaos stops; what has not finished yet gets `--grace` seconds of a calm operator
        # (still restarted should it exit): a trial unfinished then is lost, not merely slowed.
        deadline = time.monotonic() + args.grace
        while not all_done.wait(1) and time.monotonic() < deadline:
            with operator.lock:
                operator.supervise()
        wall = max((t for t, _ in finished.values()), default=time.monotonic()) - began
        trials = custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                      "trials")["items"]
        events: Counter[tuple[str, str]] = Counter()
        for ev in core.list_namespaced_event(namespace).items:
            if ev.involved_object.kind == "Trial" and ev.reason in STARTED:
                events[(ev.involved_object.name, ev.reason)] += ev.count or 1
    finally:
        chaos.done.set()
        with operator.lock:
            operator.stop()
    results = [examine(t, events) for t in trials]
    lost = [r for r in results if r["phase"] not in ("Completed", "Failed")]
    duplicated = [r for r in results if r["duplicated"]]
    failed = [r for r in results if r["phase"] in ("Completed", "Failed") and not r["ok"]]
    retried = [r for r in results if r["attempts"] > 1]
    log_text = log.read_text(errors="replace")
    restarts = Counter(r["arm"] for r in chaos.restarts if "error" not in r)
    figures: dict[str, Any] = {
        "trials": args.n, "arms": " ".join(args.arms), "kills": len(chaos.kills),
        "restarts": dict(restarts),
        "restart errors": [r["error"] for r in chaos.restarts if "error" in r],
        "seconds to serve again": {arm: [r["seconds"] for r in chaos.restarts
                                         if r["arm"] == arm and "error" not in r]
                                   for arm in restarts},
        "evictions requested": sum("pod" in e for e in chaos.evictions),
        # The trials' own record: the operator deletes an evicted pod when it retries.
        "pods evicted": sum("(Evicted)" in w for r in results for w in r["retried_because"]),
        "operator starts": operator.starts,
        "operator exits by itself": {str(k): v for k, v in operator.exits.items()},
        "lost": len(lost), "duplicated phases": len(duplicated), "failed": len(failed),
        "retried trials": len(retried),
        "retry reasons": dict(Counter(w.split(":", 1)[0] for r in retried
                                      for w in r["retried_because"])),
        "failure reasons": dict(Counter(r["why"].split(":", 1)[0] for r in failed)),
        "trials with a Started Event posted again": sum(bool(r["repeated_events"])
                                                        for r in results),
        "rewarded trials missing a Started Event": sum(bool(r["missing_events"])
                                                       for r in results),
        "completed with reward 1": sum(r["ok"] for r in results),
        "finished during the chaos": during,
        "wall time (s)": round(wall, 1),
        "leases acquired (log)": log_text.count("shipyard.leader: leading:"),
        "seed": seed,
    }
    print(f"chaos: N = {args.n}, arms {' '.join(args.arms)}, kills every {args.kill_every[0]:g}-"
          f"{args.kill_every[1]:g}s, "
          f"{'new identity per restart' if args.new_identity else 'same identity (restart)'}, "
          f"{os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for key, value in figures.items():
        print(f"  {key:<26} {value}")
    for r in duplicated:
        print(f"  duplicated {r['name']}: {', '.join(r['duplicated'])}")
    repeats = Counter(e.split(" ", 1)[1] for r in results for e in r["repeated_events"])
    if repeats:
        print(f"  (Started Events posted again after a restart, not phases run again: "
              f"{dict(repeats)} trials)")
    for r in retried[:20]:
        print(f"  retried {r['name']} ({r['phase']}): {'; '.join(r['retried_because'])}")
    for r in failed[:20]:
        print(f"  failed {r['name']}: {r['why']}")
    for r in lost[:20]:
        print(f"  lost {r['name']}: phase {r['phase']}")
    print(f"  (operator log {log})")
    if args.json:
        Path(args.json).write_text(json.dumps({**figures, "results": results,
                                               "restart log": chaos.restarts,
                                               "evictions": chaos.evictions}, indent=1))
    if not (lost or duplicated or failed):
        core.delete_namespace(namespace)
        return 0
    print(f"  namespace {namespace} kept for inspection", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
