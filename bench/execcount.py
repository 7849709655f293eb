"""Programs started in pods, counted with the kernel's process events connector (netlink,
`PROC_EVENT_FORK`/`PROC_EVENT_EXEC`; needs root): every execve on the machine while it listens,
each attributed to the cgroup of its process. A forked process takes its parent's cgroup (read
from /proc/PID/cgroup of the parent, which is alive when it forks, once per parent), so a
program that exits at once is counted too; a process first seen at its exec is looked up then.
`programs(uids)` is the count in the pods of those UIDs (other pods on a shared node are left
out).

    counter = ExecCounter(); counter.start(); ...; counter.stop(); counter.programs(uids)
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections import Counter

NETLINK_CONNECTOR = 11
CN_IDX_PROC = CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN, PROC_CN_MCAST_IGNORE = 1, 2
PROC_EVENT_FORK, PROC_EVENT_EXEC, PROC_EVENT_EXIT = 1, 2, 0x80000000
NLMSG_DONE = 3
HEADER = struct.Struct("=IHHII")  # nlmsghdr
CN_MSG = struct.Struct("=IIIIHH")  # cb_id (idx, val), seq, ack, len, flags
EVENT = struct.Struct("=IIQ")  # what, cpu, timestamp_ns


def _cgroup(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            text = f.read()
    except OSError:
        return None
    return text if "kubepods" in text else ""


class ExecCounter:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        self.sock.bind((0, CN_IDX_PROC))
        self.sock.settimeout(0.5)
        self.cgroups: dict[int, str] = {}  # tgid -> its cgroup text ("" outside kubepods)
        self.execs: Counter[str] = Counter()  # cgroup text -> execs
        self.lost = 0  # execs of processes gone before their cgroup could be read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _control(self, op: int) -> None:
        payload = CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, 4, 0) + struct.pack("=I", op)
        self.sock.send(HEADER.pack(HEADER.size + len(payload), NLMSG_DONE, 0, 0, os.getpid())
                       + payload)

    def start(self) -> None:
        self._control(PROC_CN_MCAST_LISTEN)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._control(PROC_CN_MCAST_IGNORE)
        self.sock.close()

    def _run(self) -> None:
        offset = HEADER.size + CN_MSG.size
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # ENOBUFS: events dropped under load
                self.lost += 1
                continue
            if len(data) < offset + EVENT.size:
                continue
            what = EVENT.unpack_from(data, offset)[0]
            body = offset + EVENT.size
            if what == PROC_EVENT_FORK:
                _ppid, ptgid, cpid, ctgid = struct.unpack_from("=IIII", data, body)
                if cpid != ctgid:
                    continue  # a thread
                if ptgid not in self.cgroups:
                    parent = _cgroup(ptgid)
                    if parent is None:
                        continue
                    self.cgroups[ptgid] = parent
                self.cgroups[ctgid] = self.cgroups[ptgid]
            elif what == PROC_EVENT_EXEC:
                _pid, tgid = struct.unpack_from("=II", data, body)
                cgroup = self.cgroups.get(tgid) or _cgroup(tgid)
                if cgroup is None:
                    self.lost += 1
                    continue
                self.cgroups[tgid] = cgroup
                if cgroup:
                    self.execs[cgroup] += 1
            elif what == PROC_EVENT_EXIT:
                pid, tgid = struct.unpack_from("=II", data, body)
                if pid == tgid:
                    self.cgroups.pop(tgid, None)

    def programs(self, uids: set[str]) -> int:
        """Execs in the pods of these UIDs (cgroupfs `pod<uid>` or systemd `pod<uid_with_>`)."""
        marks = {f"pod{u}" for u in uids} | {f"pod{u.replace('-', '_')}" for u in uids}
        return sum(n for cgroup, n in self.execs.items() if any(m in cgroup for m in marks))
