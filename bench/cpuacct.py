"""Where the node's CPU went during an arm of a bench: CPU seconds by component, read from
/proc (the cluster's daemons by name, the operator by pid) and from the `kubepods` cgroup (the
pods' own processes, including what runs in them by exec). A process's count includes the
children it reaped (runc under its containerd shim, kube-router's iptables), but a shim that
ends with its pod is counted when init reaps it (`reaped`); `other` is the rest of the node's
busy time.

    before = snapshot(operator_pid)
    ...
    print(format_spent(spent(before, snapshot(operator_pid))))
"""

from __future__ import annotations

import os
from pathlib import Path

DAEMONS = ("kube-apiserver", "etcd", "kubelet", "containerd-shim", "containerd",
           "kube-scheduler", "kube-controller", "kube-proxy", "kube-router", "buildkitd",
           "registry")
PODS_CGROUPS = ("/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage",
                "/sys/fs/cgroup/kubepods.slice/cpu.stat", "/sys/fs/cgroup/kubepods/cpu.stat")
TICK = os.sysconf("SC_CLK_TCK")


def _proc_seconds(pid: int) -> tuple[str, float] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2:].split()
    # utime + stime, and the children's it reaped (a daemon's helpers: kube-router's
    # iptables-restore, the kubelet's mounts, runc under a containerd shim)
    return comm, sum(int(v) for v in fields[11:15]) / TICK


def _pods_seconds() -> float:
    for path in PODS_CGROUPS:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpuacct.usage"):
            return int(text) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    return 0.0


def _busy_seconds() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    return (sum(values[:8]) - values[3] - values[4]) / TICK  # all but idle and iowait


def snapshot(*pids: int) -> dict[str, float]:
    """CPU seconds so far: per daemon (summed over processes of that name), `operator` (the
    given pids and their children reaped), `python` (other Python programs: this bench, other
    tests on the node), `pods`, and `busy` (the whole node)."""
    out: dict[str, float] = {d: 0.0 for d in DAEMONS}
    out["python"] = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        got = _proc_seconds(int(entry.name))
        if got is None:
            continue
        comm, seconds = got
        if comm.startswith("python") and int(entry.name) not in pids:
            out["python"] = out.get("python", 0.0) + seconds  # other programs: benches, tests
            continue
        for daemon in DAEMONS:
            if comm.startswith(daemon[:15]):
                out[daemon] += seconds
                break
    try:  # orphans reaped by init: mostly the shims of pods gone since (and their runc)
        init = Path("/proc/1/stat").read_text()
        out["reaped"] = sum(int(v) for v in init[init.rindex(")") + 2:].split()[13:15]) / TICK
    except OSError:
        out["reaped"] = 0.0
    out["operator"] = sum(s for p in pids if (g := _proc_seconds(p)) for s in [g[1]])
    out["pods"] = _pods_seconds()
    out["busy"] = _busy_seconds()
    return out


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds between two snapshots; `other` the node's busy time nobody above took."""
    diff = {k: max(0.0, after.get(k, 0.0) - v) for k, v in before.items()}
    named = sum(v for k, v in diff.items() if k != "busy")
    diff["other"] = max(0.0, diff["busy"] - named)
    return diff


def format_spent(diff: dict[str, float], per: int = 1) -> str:
    """`busy 41.2 s: apiserver 9.1, …` (per item when `per` > 1), largest first."""
    scale = 1 / per
    parts = sorted(((k, v) for k, v in diff.items() if k != "busy" and v >= 0.05 * per),
                   key=lambda kv: -kv[1])
    unit = "s" if per == 1 else f"s per item of {per}"
    return (f"cpu {diff['busy'] * scale:.2f} {unit}: "
            + ", ".join(f"{k.removeprefix('kube-')} {v * scale:.2f}" for k, v in parts))
