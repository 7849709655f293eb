"""Parsing what the in-pod runner prints for `launch`, `status` and `result`."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CollectedFile:
    size: int  # the file's full size; content may be only its tail
    content: bytes

    @property
    def truncated(self) -> bool:
        return len(self.content) < self.size

    def text(self) -> str:
        return self.content.decode(errors="replace")


@dataclass(frozen=True)
class PackedArtifacts:
    """The artifacts tar as a finished phase's reply carried it (`result`/`launch` asked for
    it, docs/runner-protocol.md): `data` when it was at most the limit asked; None with its
    `size` when it was over (refused); `size` None when none was packed."""

    size: int | None
    data: bytes | None = None


ARTIFACTS_FILE = "%artifacts"
"""The name the packed tar takes among a result's files (never a collected file's: theirs are
absolute paths)."""


@dataclass(frozen=True)
class PhaseStatus:
    state: str  # none | running | done
    exit_code: int | None = None
    timed_out: bool = False
    oom_killed: int = 0  # processes of the phase the kernel killed at the memory limit
    started: str | None = None
    finished: str | None = None
    files: dict[str, CollectedFile] = field(default_factory=dict)
    collected: bool = False  # a finished phase's files are here (`result`, or a quick `launch`)
    base: int | None = None  # the pod's process base, from the launch that took it (runner.sh)
    artifacts: PackedArtifacts | None = None  # None: not carried (not asked, an older runner)

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def output(self) -> str:
        """What the phase printed outside its own log redirections (runner messages too)."""
        f = self.files.get("output")
        return f.text() if f else ""

    @property
    def runner_notes(self) -> str:
        """The runner's own lines in the output (e.g. what it ended after the phase), each
        ending in a newline: kept with the phase's log even where the log is a file."""
        return "".join(line + "\n" for line in self.output.splitlines()
                       if line.startswith("shipyard runner: "))


class RunnerProtocolError(Exception):
    """The runner's answer could not be read (the pod is not what we expect)."""


END_MARK = "%%end"
"""The last line of a result whose head says `end=1` (runner.sh `result`)."""


def parse_status_line(line: str) -> dict[str, str]:
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    if "state" not in fields:
        raise RunnerProtocolError(f"unexpected runner output: {line[:200]!r}")
    return fields


def parse_runner_output(text: str) -> PhaseStatus:
    lines = text.splitlines()
    if not lines:
        raise RunnerProtocolError("the runner printed nothing")
    head = parse_status_line(lines[0])
    if head.get("end") == "1":
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        if lines[-1].strip() != END_MARK:
            raise RunnerProtocolError("the runner's result was cut short (no end mark): its "
                                      "output was lost on the way")
        lines = lines[:-1]
    files: dict[str, CollectedFile] = {}
    name: str | None = None
    size = 0
    chunks: list[str] = []

    def flush() -> None:
        if name is None:
            return
        try:
            files[name] = CollectedFile(size, base64.b64decode("".join(chunks)))
        except (binascii.Error, ValueError) as e:
            raise RunnerProtocolError(f"could not decode {name}: {e}") from e

    for line in lines[1:]:
        if line.startswith("== "):
            flush()
            parts = line[3:].rsplit(" ", 1)
            if len(parts) != 2 or not parts[1].isdigit():
                raise RunnerProtocolError(f"malformed file header: {line[:200]!r}")
            name, size, chunks = parts[0], int(parts[1]), []
        else:
            chunks.append(line.strip())
    flush()
    artifacts = _packed_artifacts(head.get("artifacts"), files.pop(ARTIFACTS_FILE, None))
    rc = head.get("rc")
    return PhaseStatus(
        state=head["state"],
        exit_code=int(rc) if rc not in (None, "") else None,
        timed_out=head.get("timed_out") == "1",
        oom_killed=int(oom) if (oom := head.get("oom_killed", "0")).isdigit() else 0,
        started=head.get("started") or None,
        finished=head.get("finished") or None,
        files=files,
        collected=head.get("result") == "1",
        base=int(b) if (b := head.get("base", "")).isdigit() else None,
        artifacts=artifacts,
    )


def _packed_artifacts(said: str | None, tar: CollectedFile | None) -> PackedArtifacts | None:
    """`artifacts=SIZE` (the tar following as a file when it was within the limit) or
    `artifacts=none`; a tar that does not match its size is taken as not carried (the
    trial's end reads it with an exec of its own)."""
    if said == "none":
        return PackedArtifacts(None)
    if said is None or not said.isdigit():
        return None
    if tar is None:
        return PackedArtifacts(int(said))
    if tar.size != int(said) or len(tar.content) != tar.size:
        return None
    return PackedArtifacts(tar.size, tar.content)


def parse_put_secrets(text: str) -> tuple[int, ...]:
    """`runner put-secrets`' answer: ``secrets=ok``, or ``secrets=missing missing=I,J`` naming
    the Secret volumes (envFrom indexes) that were empty."""
    fields = dict(p.split("=", 1) for p in text.split() if "=" in p)
    if fields.get("secrets") not in ("ok", "missing"):
        raise RunnerProtocolError(f"put-secrets answered {text[:200]!r}")
    return tuple(int(i) for i in fields.get("missing", "").split(",") if i.isdigit())


def parse_chain_output(text: str) -> list[tuple[str, PhaseStatus]]:
    """What `runner chain` prints: `=== ID` before each launched phase's own output."""
    parts: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("=== "):
            parts.append((line[4:].strip(), []))
        elif parts:
            parts[-1][1].append(line)
        elif line.strip():
            raise RunnerProtocolError(f"unexpected runner output: {line[:200]!r}")
    if not parts:
        raise RunnerProtocolError("the runner launched no phase of the chain")
    return [(phase_id, parse_runner_output("\n".join(lines))) for phase_id, lines in parts]
