#!/usr/bin/env python3
"""Real public Harbor tasks on the local cluster: each run with `oracle` (should score 1) and
`nop` (should score 0), each failure classified with the line that shows why.

    python bench/realtasks.py DIR... [--parallel 2] [--timeout 900] [--json OUT]

DIR is a task directory (it has task.toml) or a directory searched for them. The bench starts
this checkout's operator (the local cluster's builder, registry and probe image) on namespaces of
its own, pushes each task as a Task, runs the two trials and prints one line per task:

- `pass`: oracle 1, nop 0;
- `task`: the task's own defect (no solution, a nop that scores, an invalid task.toml that
  Harbor refuses too, a solution importing a name that today's release of an unpinned
  dependency lacks);
- `environment`: this machine (no internet beyond the package registries, no GPU, no model API
  key, a base image with no local stand-in) — the evidence line says which;
- `isolation`: the oracle's solution left a service running that the tests expect, and
  Shipyard's phase isolation ended it (the runner names what it ended); with
  `--agent-processes Keep` (Harbor's behaviour) such a task is run as Harbor runs it;
- `shipyard`: anything else; the evidence is the trial's own error, to be looked at.

and a summary line. Fetched tasks are inputs only: never commit them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))
sys.path.insert(0, str(ROOT / "operator"))

GROUP, VERSION = "shipyard.dev", "v1alpha1"

# What this machine cannot give a task, as it shows in a build's or a phase's output.
ENVIRONMENT_PATTERNS = [
    (r"Could not resolve host|Temporary failure in name resolution|Name or service not known|"
     r"getaddrinfo|nodename nor servname|No address associated with hostname|"
     r"Failed to establish a new connection|Network is unreachable|curl: \(\d+\)|"
     r"Connection refused|Connection timed out|ConnectTimeout|ProxyError|"
     r"403 Forbidden|Tunnel connection failed|unable to access 'https?://|"
     r"fatal: unable to access|wget: (unable|bad address|server returned)|"
     r"Unable to connect to|HTTPSConnectionPool|[Ff]ailed to fetch|Could not fetch URL",
     "no internet beyond the package registries"),
    (r"nvidia|CUDA|nvidia.com/gpu|google.com/tpu", "no GPU/TPU here"),
    (r"ANTHROPIC_API_KEY|OPENAI_API_KEY|API key|api_key|GEMINI_API_KEY", "no model API key"),
    (r"no stand-in|manifest unknown|not found: manifest|failed to resolve source metadata|"
     r"pull access denied|ErrImagePull|ImagePullBackOff|failed to do request|"
     r"load metadata for \S+ failed \(\S+: not found\)",
     "a base image with no local stand-in"),
    (r"windows|Windows", "a Windows image"),
    (r"FQDN network policy backend", "no FQDN network policy backend on this cluster"),
    (r"[Uu]se\.?[Cc]omputer|computer-use|Daytona|daytona|DAYTONA",
     "a computer-use/sandbox provider"),
    (r"environments \(nodes, hosts, VMs\) are not provided",
     "an environment type (machines, VMs) that a fork of Harbor adds and pods cannot be"),
]


# A name the pod could not resolve: no internet, whatever else the phase did.
NO_INTERNET = (r"Could not resolve host|Temporary failure in name resolution|"
               r"Name or service not known")
# A build's COPY of a path that is missing from its context.
COPY_MISSING = re.compile(r'COPY (\S+) \S+ failed \(failed to calculate checksum of ref '
                          r'\S+ "/?([^"]+)": not found\)')

# The tests' interpreter without the module they run (an image with no pip or pytest).
NO_MODULE = re.compile(r"No module named (?:pytest|pip)\b")
# A compose service's build whose Dockerfile is not in the task (Shipyard refuses the task).
COMPOSE_NO_DOCKERFILE = re.compile(r"services\.[^.\s]+\.build: \S+ not found \(the build's "
                                   r"Dockerfile\)")

# What the runner writes into a phase's log when it ended what the phase left running.
ISOLATION_LINE = "the phase left processes running, now ended"
# The solution imports a name its (unpinned) dependency's release of today no longer has.
NAME_GONE = re.compile(r"ImportError: cannot import name '[\w.]+' from '[\w.]+'")
# A probe that fails while a container starts (a compose service's healthcheck before its
# server listens): the kubelet's Warning, not evidence of what this machine lacks.
PROBE_WARNING = re.compile(r"(Startup|Readiness|Liveness) probe failed")


@dataclass
class Run:
    agent: str
    phase: str = ""
    reward: float | None = None
    rewards: dict[str, float] | None = None
    error: str = ""
    evidence: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    task: str
    path: str
    verdict: str = ""
    evidence: str = ""
    runs: list[Run] = field(default_factory=list)
    seconds: float = 0.0


def task_dirs(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if (p / "task.toml").is_file():
            found.append(p)
        else:
            found += sorted(t.parent for t in p.rglob("task.toml"))
    return list(dict.fromkeys(found))


def resource_name(path: Path, index: int) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", path.name.lower()).strip("-")[:30].strip("-") or "task"
    return f"{base}-{index}"


class Cluster:
    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        config.load_kube_config(config_file=kubeconfig)
        self.core, self.api = client.CoreV1Api(), client.CustomObjectsApi()

    def get(self, ns: str, plural: str, name: str) -> dict[str, Any]:
        return self.api.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)

    def trial(self, ns: str, name: str, task: str, agent: str, keep_pods: bool = False,
              agent_processes: str = "End") -> None:
        self.api.create_namespaced_custom_object(GROUP, VERSION, ns, "trials", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial", "metadata": {"name": name},
            "spec": {"taskRef": {"name": task}, "agent": {"name": agent},
                     "verifier": {"agentProcesses": agent_processes},
                     **({"keepPods": True} if keep_pods else {})}})

    def logs(self, ns: str, trial: dict[str, Any]) -> str:
        cm = (trial.get("status") or {}).get("logsConfigMap")
        if not cm:
            return ""
        try:
            data = self.core.read_namespaced_config_map(cm, ns).data or {}
        except Exception:
            return ""
        return "\n".join(v for _, v in sorted(data.items()))

    def build_lines(self, ns: str) -> list[str]:
        """Lines of the namespace's image builds that show a name not resolving: a build step
        that swallowed its failed download (`curl … | sh`) still succeeds, and the task fails
        later for what it did not install."""
        out = []
        for pod in self.core.list_namespaced_pod(ns, label_selector="job-name").items:
            try:
                text = self.core.read_namespaced_pod_log(pod.metadata.name, ns)
            except Exception:
                continue
            out += [f"build: {ln.strip()}" for ln in text.splitlines()
                    if re.search(NO_INTERNET, ln)][:3]
        return out

    def events(self, ns: str) -> list[str]:
        return [f"{e.reason}: {e.message}" for e in self.core.list_namespaced_event(ns).items
                if e.type == "Warning"]


def messages(obj: dict[str, Any]) -> list[str]:
    status = obj.get("status") or {}
    out = []
    if status.get("error"):
        out.append(f"{status['error'].get('type')}: {status['error'].get('message')}")
    for c in status.get("conditions") or []:
        if (c.get("status") == "False" or c.get("type") == "Failed") and c.get("message"):
            out.append(f"{c.get('reason')}: {c['message']}")
    for s in status.get("steps") or []:
        if s.get("error"):
            out.append(f"step {s.get('name')}: {s['error'].get('message')}")
    return out


def run_task(cluster: Cluster, ns: str, path: Path, index: int, timeout: float,
             keep_pods: bool = False, agent_processes: str = "End") -> Outcome:
    from shipyard.kube.bundles import push_task
    from shipyard.taskformat import TaskFormatError, load_task_dir

    name = resource_name(path, index)
    outcome = Outcome(task=name, path=str(path))
    began = time.monotonic()
    try:
        loaded = load_task_dir(path)
    except TaskFormatError as e:
        outcome.verdict = "task"
        outcome.evidence = "; ".join(f"{x.file}: {x.field}: {x.reason}" for x in e.errors)[:300]
        return outcome
    try:
        push_task(ns, name, loaded.files)
    except Exception as e:
        outcome.verdict, outcome.evidence = "shipyard", f"push failed: {e}"[:300]
        return outcome
    for agent in ("oracle", "nop"):
        cluster.trial(ns, f"{name}-{agent}", name, agent, keep_pods, agent_processes)
    deadline = time.monotonic() + timeout
    for agent in ("oracle", "nop"):
        run, trial = Run(agent), {}
        while time.monotonic() < deadline:
            trial = cluster.get(ns, "trials", f"{name}-{agent}")
            if (trial.get("status") or {}).get("phase") in ("Completed", "Failed"):
                break
            time.sleep(2)
        status = trial.get("status") or {}
        run.phase = status.get("phase", "Pending")
        if run.phase not in ("Completed", "Failed"):
            run.phase = f"{run.phase} (bench timeout, at {status.get('currentPhase')})"
        run.reward, run.rewards = status.get("reward"), status.get("rewards")
        error = "; ".join(messages(trial))
        # a failure's cause is often at the end (a service's log tail): keep both ends
        run.error = error if len(error) <= 600 else f"{error[:200]} … {error[-400:]}"
        logs = cluster.logs(ns, trial).splitlines()
        # The runner's line about processes it ended is in the agent's log, which a long
        # verifier log would push out of the tail kept.
        ended = [ln for ln in logs if ISOLATION_LINE in ln][:1]
        gone = [ln for ln in logs if NAME_GONE.search(ln)][:1]
        run.evidence = [*messages(trial), *ended, *gone, *logs[-60:]]
        outcome.runs.append(run)
    task = cluster.get(ns, "tasks", name)
    ready = [f"{c.get('reason')}: {c.get('message')}" for c in
             (task.get("status") or {}).get("conditions") or [] if c.get("status") == "False"]
    classify(outcome, loaded, ready, [*cluster.events(ns), *cluster.build_lines(ns)])
    outcome.seconds = time.monotonic() - began
    return outcome


def _score(run: Run) -> float | None:
    if run.reward is not None:
        return run.reward
    if run.rewards:
        return min(run.rewards.values())
    return None


def classify(outcome: Outcome, loaded: Any, ready: list[str], events: list[str]) -> None:
    oracle, nop = outcome.runs
    if _score(oracle) == 1 and not _score(nop):
        outcome.verdict, outcome.evidence = "pass", ""
        return
    files = set(loaded.files)
    has_solution = any(f.startswith("solution/") or "/solution/" in f for f in files)
    unsolved = any("the oracle agent needs a solution script" in line
                   for line in oracle.evidence)  # a step without one, and no solution/
    if _score(oracle) != 1 and (not has_solution or unsolved):
        outcome.verdict, outcome.evidence = "task", (
            "a step without a solution, and no solution/ (Harbor's oracle fails there too)"
            if unsolved else "no solution/ (oracle has nothing to run)")
        return
    lines = [*ready, *oracle.evidence, *nop.evidence, *events]
    copy = _failed_copy(lines, files)
    if _score(oracle) != 1 and copy is not None:
        path, beside = copy
        outcome.verdict = "task"
        outcome.evidence = (
            f"environment/Dockerfile COPYs {path}/, which is beside environment/, not in it: "
            "Harbor builds from environment/ too (a docker-compose.yaml with context "
            "${CONTEXT_DIR}/.. would do)" if beside else
            f"the build COPYs environment/{path}, which is not among the task's files (a "
            "large file its source left out?)")
        return
    no_dockerfile = next((ln for ln in lines if COMPOSE_NO_DOCKERFILE.search(ln)), None)
    if _score(oracle) != 1 and no_dockerfile:
        outcome.verdict = "task"
        outcome.evidence = ("a compose service builds from a Dockerfile the task lacks (paths "
                            f"are relative to environment/, in Harbor too): {no_dockerfile}"
                            )[:300]
        return
    ended = next((ln for ln in oracle.evidence if ISOLATION_LINE in ln), None)
    offline = next((ln for ln in lines if re.search(NO_INTERNET, ln)), None)
    if _score(oracle) != 1 and ended and not offline:
        outcome.verdict, outcome.evidence = "isolation", ended.strip()[:240]
        return
    gone = next((ln for ln in oracle.evidence if NAME_GONE.search(ln)), None)
    if _score(oracle) != 1 and gone and not offline:
        outcome.verdict = "task"
        outcome.evidence = ("the solution imports a name that today's release of its "
                            "dependency lacks (unpinned: Harbor installs the same today): "
                            f"{gone.strip()}")[:300]
        return
    for pattern, why in ENVIRONMENT_PATTERNS:
        hit = next((ln for ln in lines if re.search(pattern, ln) and not PROBE_WARNING.search(ln)),
                   None)
        if hit:
            outcome.verdict = "environment"
            outcome.evidence = f"{why}: {hit.strip()[:240]}"
            return
    if _score(oracle) == 1 and _score(nop):
        outcome.verdict, outcome.evidence = "task", f"nop scored {_score(nop)}"
        return
    missing = next((ln for ln in oracle.evidence if NO_MODULE.search(ln)), None)
    if _score(oracle) != 1 and missing:
        outcome.verdict = "task"
        outcome.evidence = ("the tests need a Python module the image lacks, and nothing "
                            f"installs it (Harbor runs the same image): {missing.strip()}")[:300]
        return
    first = next((ln for ln in [*ready, oracle.error, nop.error] if ln), "")
    tail = next((ln for ln in reversed(oracle.evidence) if ln.strip()), "")
    outcome.verdict = "shipyard"
    outcome.evidence = (f"oracle {oracle.phase} reward {_score(oracle)}: "
                        f"{first or tail}")[:400]


def _failed_copy(lines: list[str], files: set[str]) -> tuple[str, bool] | None:
    """The path a failed COPY wanted, when the task lacks it in environment/: with True when
    the task has it beside environment/, False when it has it nowhere."""
    for line in lines:
        if (hit := COPY_MISSING.search(line)) is not None:
            path = hit.group(2).rstrip("/")
            if any(f.startswith(f"environment/{path}") for f in files):
                continue
            return path, any(f == path or f.startswith(f"{path}/") for f in files)
    return None


def start_operator(kubeconfig: str, prefix: str, log: Path, ratio: str,
                   source: Path | None = None) -> subprocess.Popen:
    """This checkout's operator on the bench's namespaces: the local cluster's builder,
    registry and probe image (its published defaults), CPU requests at `ratio` of the declared
    cpus (a 2-core node), its own Lease."""
    from imagebuilds import REGISTRY
    from operator_defaults import DEFAULTS

    env = {
        **DEFAULTS,
        "SHIPYARD_BUILD_REGISTRY": f"{REGISTRY}/shipyard-realtasks",
        "SHIPYARD_TRIAL_CPU_REQUEST_RATIO": ratio,
        "SHIPYARD_LEADER_LEASE_NAME": f"shipyard-operator-{prefix}",
        "SHIPYARD_LEADER_LEASE_NAMESPACE": "default",
        "SHIPYARD_LEADER_IDENTITY": f"{prefix}-bench",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "shipyard", "operator", "--liveness", "", "-n", f"{prefix}-*"],
        env=dict(os.environ, KUBECONFIG=kubeconfig, PYTHONUNBUFFERED="1", **env,
                 **({"PYTHONPATH": str(source / "operator")} if source else {})),
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
        start_new_session=True)


def table(outcomes: list[Outcome]) -> str:
    rows = [f"{'task':<34} {'verdict':<12} {'oracle':>7} {'nop':>5}  evidence"]
    for o in outcomes:
        scores = [_score(r) for r in o.runs] or [None, None]
        fmt = ["-" if s is None else f"{s:g}" for s in scores]
        rows.append(f"{o.task:<34} {o.verdict:<12} {fmt[0]:>7} {fmt[1]:>5}  {o.evidence}")
    counts = {v: sum(o.verdict == v for o in outcomes)
              for v in ("pass", "isolation", "shipyard", "environment", "task")}
    rows.append(f"summary: {len(outcomes)} tasks: " + ", ".join(f"{v} {n}" for v, n in
                                                                 counts.items()))
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--parallel", type=int, default=2, help="tasks at once")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per task")
    parser.add_argument("--json", type=Path, default=None, help="write the outcomes here")
    parser.add_argument("--keep", action="store_true", help="keep the namespaces")
    parser.add_argument("--keep-pods", action="store_true", help="trials keep their pods")
    parser.add_argument("--agent-processes", choices=["End", "Keep"], default="End",
                        help="the trials' verifier.agentProcesses (Keep: Harbor's behaviour)")
    parser.add_argument("--operator-source", type=Path, default=None,
                        help="run the operator from this checkout's operator/ (e.g. an older "
                             "commit's worktree, for a before/after comparison)")
    parser.add_argument("--cpu-request-ratio", default="0.25",
                        help="the operator's SHIPYARD_TRIAL_CPU_REQUEST_RATIO (default 0.25)")
    args = parser.parse_args()
    from layout import Layout

    kubeconfig = os.environ.get("KUBECONFIG") or str(Layout.default().kubeconfig)
    os.environ["KUBECONFIG"] = kubeconfig
    dirs = task_dirs(args.dirs)
    if not dirs:
        print("no task.toml under the given directories", file=sys.stderr)
        return 2
    cluster = Cluster(kubeconfig)
    prefix = f"rtb-{uuid.uuid4().hex[:6]}"
    namespaces = [f"{prefix}-{i}" for i in range(len(dirs))]
    subprocess.run([str(Layout.default().binary("kubectl")), "--kubeconfig", kubeconfig,
                    "apply", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    log = Path(tempfile.mkdtemp()) / "operator.log"
    print(f"{len(dirs)} tasks; operator log {log}", flush=True)
    operator = start_operator(kubeconfig, prefix, log, args.cpu_request_ratio,
                              args.operator_source)

    def one(i: int) -> Outcome:
        cluster.core.create_namespace({"metadata": {"name": namespaces[i]}})
        try:
            o = run_task(cluster, namespaces[i], dirs[i], i, args.timeout, args.keep_pods,
                         args.agent_processes)
        except Exception as e:
            o = Outcome(task=resource_name(dirs[i], i), path=str(dirs[i]), verdict="shipyard",
                        evidence=f"bench: {type(e).__name__}: {e}"[:300])
        print(f"{o.task:<34} {o.verdict:<12} {o.evidence}", flush=True)
        if not args.keep:
            cluster.core.delete_namespace(namespaces[i])
        return o

    try:
        with ThreadPoolExecutor(args.parallel) as pool:
            outcomes = list(pool.map(one, range(len(dirs))))
    finally:
        os.killpg(operator.pid, 15)
        operator.wait(30)
    print()
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
