"""Where the node's CPU went inside a bench's measured window, by program: `perf record` of the
whole machine (sampling every CPU at 499 Hz, timestamps on CLOCK_MONOTONIC so that Python's
`time.monotonic()` marks the window), reported by the sampled process's name. Unlike `cpuacct`
(per daemon, from /proc) it sees the short programs that daemons start (runc and its
`runc init`, the CNI plugins, iptables) and what runs in pods (the runner, the task's `sh`),
and it counts only the window, not an arm's setup or teardown. Needs `perf` and root.

    with recording(path):  # path None: nothing recorded
        ...  # each arm appends (name, (began, ended)) to windows
    print_windows(path, windows, items)
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HZ = 499
FAMILIES = (
    ("runc", re.compile(r"^(runc|runc:\[.*\]|exe)$")),
    ("cni", re.compile(r"^(bridge|host-local|portmap|loopback)$")),
    ("iptables", re.compile(r"^(iptables.*|ip6tables.*|ipset)$")),
    ("runner", re.compile(r"^(runner|memfd:shipyard-.*)$")),
    ("idle", re.compile(r"^swapper")),
    ("kworker", re.compile(r"^(kworker/.*|ksoftirqd/.*|rcu_.*|kdamond.*)$")),
)
"""Programs shown as one: a name's family, else the name itself (`perf` keeps 15 characters)."""


class Recorder:
    """`perf record -a` into `path` from start() to stop()."""

    def __init__(self, path: Path) -> None:
        if shutil.which("perf") is None:
            raise SystemExit("--perf needs `perf` (Debian: linux-perf)")
        self.path = path
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["perf", "record", "-q", "-a", "-F", str(HZ), "-k", "CLOCK_MONOTONIC",
             "-o", str(self.path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(60)
            self.process = None


def by_program(path: Path, began: float, ended: float) -> Counter[str]:
    """CPU seconds by program (families merged) sampled between `began` and `ended`
    (`time.monotonic()` values)."""
    report = subprocess.run(
        ["perf", "report", "-q", "-n", "-i", str(path), "--time", f"{began:.6f},{ended:.6f}",
         "--sort", "comm", "--stdio"],
        capture_output=True, text=True)
    if report.returncode != 0:
        raise SystemExit(f"perf report of {path} failed (perf record needs root, and "
                         f"kernel.perf_event_paranoid <= 1 otherwise): "
                         f"{(report.stderr or report.stdout).strip()[-300:]}")
    seconds: Counter[str] = Counter()
    for line in report.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        name = parts[2].strip()
        family = next((f for f, pattern in FAMILIES if pattern.match(name)), name)
        seconds[family] += int(parts[1]) / HZ
    return seconds


def format_by_program(seconds: Counter[str], items: int, top: int = 12) -> str:
    """`perf: 0.93 CPU s per item of 60: runc 0.12, kube-apiserver 0.11, …; idle 0.05`."""
    idle = seconds.pop("idle", 0.0)
    busy = sum(seconds.values())
    parts = ", ".join(f"{name} {s / items:.3f}" for name, s in seconds.most_common(top))
    return (f"perf: {busy / items:.2f} CPU s per item of {items}: {parts}; "
            f"idle {idle / items:.2f}")


@contextmanager
def recording(path: Path | None) -> Iterator[None]:
    """The node recorded into `path` while the block runs (nothing when `path` is None)."""
    recorder = Recorder(path) if path else None
    if recorder:
        recorder.start()
    try:
        yield
    finally:
        if recorder:
            recorder.stop()


def print_windows(path: Path | None, windows: list[tuple[str, tuple[float, float]]],
                  items: int) -> None:
    """One line per arm: its CPU by program inside its window (nothing when `path` is None)."""
    for name, (began, ended) in windows if path else ():
        print(f"{name}, {format_by_program(by_program(path, began, ended), items)}")
