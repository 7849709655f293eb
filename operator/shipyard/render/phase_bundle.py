"""The tar stream that carries one phase into the pod (see runner.sh for its layout)."""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from collections.abc import Sequence

from shipyard.plan.phases import EnvironmentScript, PhaseSpec, VerifierEnvironmentScript
from shipyard.render.phase_scripts import phase_scripts

PAYLOAD_DIR = "payload"


def _spec_file(phase: PhaseSpec) -> str:
    timeout = "" if phase.timeout_sec is None else str(max(1, int(phase.timeout_sec)))
    # OWN=1: a pod's first phase, Shipyard's own (directories, environment files; no task
    # code): the runner need not look for processes it left (see runner.sh `own`).
    own = isinstance(phase.script, EnvironmentScript | VerifierEnvironmentScript)
    return (
        f"USER_NAME={shlex.quote(phase.user or '')}\n"
        f"TIMEOUT={timeout}\n"
        f"CWD={shlex.quote(phase.cwd or '')}\n"
        f"SECRETS={1 if phase.secrets else 0}\n"
        f"OWN={1 if own else 0}\n"
        + ("KEEP=1\n" if phase.keep_processes else "")
    )


def _env_file(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def build_phase_bundle(phase_id: str, phase: PhaseSpec) -> bytes:
    """An uncompressed tar, relative to the phase directory /shipyard/phases/<phase_id>."""
    scripts = phase_scripts(phase)
    members: dict[str, tuple[bytes, int]] = {
        "spec": (_spec_file(phase).encode(), 0o600),
        "env": (_env_file(phase.env).encode(), 0o600),
        "command": (scripts.command.encode(), 0o644),
    }
    if scripts.prepare:
        # prepare runs as root before the payload is removed; the runner sets SHIPYARD_PAYLOAD.
        prepare = f"set -e\n{scripts.prepare}"
        members["prepare"] = (prepare.encode(), 0o600)
    # The same steps for the Go runner, which does them itself (runner/ops.go).
    for name, ops in (("prepare.ops", scripts.prepare_ops), ("command.ops", scripts.command_ops)):
        if ops is not None:
            members[name] = ("".join(json.dumps(op) + "\n" for op in ops).encode(), 0o600)
    if phase.collect:
        members["collect"] = ("\n".join(phase.collect).encode() + b"\n", 0o600)
    for path, content in phase.payload.items():
        members[f"{PAYLOAD_DIR}/{path}"] = (content, 0o755 if path.endswith(".sh") else 0o644)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, (content, mode) in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = mode
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def build_chain_bundle(bundles: list[tuple[str, bytes]],
                       keys: Sequence[tuple[str, str]] = ()) -> bytes:
    """The tar `runner chain` reads: each phase's own bundle as `<phase id>.tar`, and each
    launch key of `keys` (given as `-` on the command line) as `<phase id>.key`."""
    buf = io.BytesIO()
    members = [(f"{i}.tar", b) for i, b in bundles] + [(f"{i}.key", k.encode()) for i, k in keys]
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
