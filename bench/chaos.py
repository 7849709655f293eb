#!/usr/bin/env python3
"""The operator SIGKILLed at random moments while N concurrent trivial trials run: printed figures.

    python bench/chaos.py [-n 100] [--kill-every 5 15] [--seed S] [--new-identity]

Uses the cluster of KUBECONFIG when SHIPYARD_USE_EXISTING_CLUSTER=1, else the local cluster.
One namespace (`$SHIPYARD_TEST_NS_PREFIX-chaos-…`, else `bench-chaos-…`) holds the Task, the
Trials and the operator's Lease. The operator (this checkout, leader-elected as in production)
serves only that namespace; every `--kill-every` seconds (uniformly random between the two
bounds) its process group is SIGKILLed and a new one started at once. With a fixed identity
(the default) the new process renews the dead one's Lease at once, as a restarted container in
the same pod would; `--new-identity` models a replaced pod: it waits for the Lease to expire.

The agent (`command`) and the verifier each append a line to a file in the environment pod;
the verifier reports both counts in reward.json. Printed: trials, kills, lost (not finished
after `--timeout` seconds of kills and then `--grace` seconds without), finished while
killing, duplicated phases (a side effect seen twice, or a phase recorded twice), failed
(finished without reward 1, with their reasons), wall time, and trials whose AgentStarted or
VerifierStarted Event was posted more than once (an Event is posted when a transition is taken;
a kill before the status write makes the restarted operator take it, and post it, again).
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

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from concurrent_trials import (  # noqa: E402
    CREATORS,
    GROUP,
    QUEUE_ENV,
    VERSION,
    apply_crds,
    ensure_cluster,
    follow_until,
    make_namespace,
    namespace_name,
    wait_ready,
)

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


def task_files(image: str) -> dict[str, str]:
    return {
        "task.toml": ('schema_version = "1.4"\n[agent]\ntimeout_sec = 300\n'
                      "[verifier]\ntimeout_sec = 120\n"
                      f'[environment]\ndocker_image = "{image}"\nworkdir = "/app"\n'
                      "build_timeout_sec = 3600\n"),
        "instruction.md": "Append a line to /app/agent-runs.\n",
        "tests/test.sh": TEST_SH,
    }


class Operator:
    """The operator process: started, SIGKILLed (its whole group), started again."""

    def __init__(self, namespace: str, kubeconfig: str, log: Path, new_identity: bool) -> None:
        self.namespace, self.log, self.new_identity = namespace, log, new_identity
        self.env = dict(os.environ, KUBECONFIG=kubeconfig, PYTHONUNBUFFERED="1", **QUEUE_ENV,
                        SHIPYARD_LEADER_LEASE_NAMESPACE=namespace)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
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

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def chaos(operator: Operator, bounds: tuple[float, float], rng: random.Random,
          done: threading.Event, kills: list[float]) -> None:
    while not done.wait(rng.uniform(*bounds)):
        with operator.lock:
            if done.is_set():
                return
            operator.kill()
            kills.append(time.monotonic())
            operator.start()


def examine(trial: dict[str, Any], events: Counter[tuple[str, str]]) -> dict[str, Any]:
    status = trial.get("status") or {}
    name = trial["metadata"]["name"]
    rewards = status.get("rewards") or {}
    phases = Counter(p.get("name") for p in status.get("phases") or [])
    duplicated, repeated = [], []
    for key in ("agent_runs", "verifier_runs"):
        if (rewards.get(key) or 0) > 1:
            duplicated.append(f"{key}={rewards[key]}")
    for phase in ("agent", "verifier"):
        if phases[phase] > 1:
            duplicated.append(f"{phases[phase]} {phase} records")
    for reason in STARTED:
        if events[(name, reason)] > 1:
            repeated.append(f"{events[(name, reason)]} {reason}")
    ok = status.get("phase") == "Completed" and status.get("reward") == 1
    error = status.get("error") or {}
    return {"name": name, "phase": status.get("phase"), "ok": ok, "duplicated": duplicated,
            "repeated_events": repeated,
            "why": f"{error.get('type')}: {error.get('message', '')[:160]}" if error else
            f"rewards {rewards}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="concurrent trials (default 100)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(5.0, 15.0),
                        metavar=("MIN", "MAX"), help="seconds between kills (default 5 15)")
    parser.add_argument("--agent-sleep", type=float, default=5,
                        help="the agent sleeps this long after its side effect (default 5)")
    parser.add_argument("--image", default="localhost/shipyard/debian:bookworm")
    parser.add_argument("--timeout", type=float, default=1500,
                        help="seconds of kills at most (they stop when every trial finished)")
    parser.add_argument("--grace", type=float, default=180,
                        help="then seconds without kills before unfinished trials count lost")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--new-identity", action="store_true",
                        help="each restart is a new pod: it waits for the Lease to expire")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    # A SIGTERM (e.g. `timeout`) still stops the operator it started (in `finally`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)

    kubeconfig = ensure_cluster()
    apply_crds(kubeconfig)
    config.load_kube_config(kubeconfig)
    api = client.ApiClient()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = namespace_name("chaos")
    make_namespace(core, namespace)
    log = Path(tempfile.mkdtemp(prefix="bench-chaos-")) / "operator.log"
    operator = Operator(namespace, kubeconfig, log, args.new_identity)
    done_all = threading.Event()
    kills: list[float] = []
    finished: dict[str, tuple[float, bool]] = {}
    print(f"== chaos: {args.n} trials in {namespace}, kills every {args.kill_every[0]:g}-"
          f"{args.kill_every[1]:g}s, seed {seed}, operator log {log}", file=sys.stderr)
    try:
        operator.start()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "chaos"},
            "spec": {"source": {"inline": {"files": task_files(args.image)}}}})
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
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trials", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial",
                "metadata": {"name": f"c{i:04d}"},
                "spec": {"taskRef": {"name": "chaos"}, "agent": agent}})

        killer = threading.Thread(target=chaos, daemon=True,
                                  args=(operator, tuple(args.kill_every), rng, done_all, kills))
        killer.start()
        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, range(args.n)))
        all_done.wait(args.timeout)
        done_all.set()
        killer.join(60)
        during = len(finished)
        # The kills stop; what has not finished yet gets `--grace` seconds of a calm operator:
        # a trial still unfinished then is lost, not merely slowed down by the kills.
        all_done.wait(args.grace)
        wall = max((t for t, _ in finished.values()), default=time.monotonic()) - began
        trials = custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                      "trials")["items"]
        events: Counter[tuple[str, str]] = Counter()
        for ev in core.list_namespaced_event(namespace).items:
            if ev.involved_object.kind == "Trial" and ev.reason in STARTED:
                events[(ev.involved_object.name, ev.reason)] += ev.count or 1
    finally:
        done_all.set()
        with operator.lock:
            operator.stop()
    results = [examine(t, events) for t in trials]
    lost = [r for r in results if r["phase"] not in ("Completed", "Failed")]
    duplicated = [r for r in results if r["duplicated"]]
    failed = [r for r in results if r["phase"] in ("Completed", "Failed") and not r["ok"]]
    log_text = log.read_text(errors="replace")
    figures: dict[str, Any] = {
        "trials": args.n, "kills": len(kills), "operator starts": operator.starts,
        "lost": len(lost), "duplicated phases": len(duplicated), "failed": len(failed),
        "trials with a Started Event posted again": sum(bool(r["repeated_events"])
                                                        for r in results),
        "completed with reward 1": sum(r["ok"] for r in results),
        "finished while killing": during,
        "wall time (s)": round(wall, 1),
        "leases acquired (log)": log_text.count("shipyard.leader: leading:"),
        "seed": seed,
    }
    print(f"chaos: N = {args.n}, kills every {args.kill_every[0]:g}-{args.kill_every[1]:g}s, "
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
    for r in failed[:20]:
        print(f"  failed {r['name']}: {r['why']}")
    for r in lost[:20]:
        print(f"  lost {r['name']}: phase {r['phase']}")
    print(f"  (operator log {log})")
    if args.json:
        Path(args.json).write_text(json.dumps({**figures, "results": results}, indent=1))
    if not (lost or duplicated or failed):
        core.delete_namespace(namespace)
        return 0
    print(f"  namespace {namespace} kept for inspection", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
