"""Shipyard's own steps of a phase (files into place, collect hooks, the artifacts packed),
executed for real by each runner: runner.sh (dash, busybox) runs the bundle's `prepare` and
`command` shell, the Go runner its `prepare.ops` and `command.ops` steps (runner/ops.go),
without any program of the image. Both must leave the same files.

The bundles are the operator's own (`build_phase_bundle` of each script intent), with their
absolute paths (/logs, /tests, /solution, /app, /shipyard/...) moved under the test's folder.
"""

from __future__ import annotations

import io
import os
import pwd
import re
import socket
import stat
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.api.conventions import launch_key
from shipyard.plan.network import FENCE_MARK, Fence
from shipyard.plan.phases import (
    CollectScript,
    CommandAgentScript,
    EnvironmentScript,
    HealthcheckScript,
    OracleScript,
    PhaseSpec,
    SetupScript,
    VerifierEnvironmentScript,
    VerifyScript,
)
from shipyard.reconcile.runner_output import PhaseStatus, parse_runner_output
from shipyard.render.artifact_bundle import clean_artifacts
from shipyard.render.phase_bundle import build_phase_bundle
from shipyard.render.phase_scripts import recovery_items
from shipyard.taskformat import ArtifactConfig, HealthcheckConfig, VerifierCollectConfig
from tests.unit.render.test_runner_sh import Runner, busybox_path, go_runner, runner  # noqa: F401

FORGED = ("cp", "mkdir", "chmod", "chown", "rm", "find", "tar", "su", "timeout", "cat", "ln",
          "mv", "install", "base64")
MOVED = ("/logs", "/tests", "/solution", "/app", "/shipyard/state", "/shipyard/instruction.md")


def _moved(text: str, fs: Path, root: Path) -> str:
    def repl(m: re.Match[str]) -> str:
        path = m.group(1)
        if path.startswith("/shipyard/state"):
            return str(root) + path[len("/shipyard"):]
        return str(fs) + path
    alternatives = "|".join(re.escape(p) for p in MOVED)
    # An absolute path, not inside another path nor after the payload folder.
    pattern = rf"(?<![\w/.$-])(?<!PAYLOAD\")((?:{alternatives})(?=[/\s\"';)]|$)[^\s\"';)]*)"
    return re.sub(pattern, repl, text)


def _bundle(phase: PhaseSpec, fs: Path, root: Path) -> bytes:
    out = io.BytesIO()
    with (tarfile.open(fileobj=io.BytesIO(build_phase_bundle("p", phase))) as src,
          tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as dst):
        for member in src:
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name in ("prepare", "command", "prepare.ops", "command.ops"):
                data = _moved(data.decode(), fs, root).encode()
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def fs(runner: Runner) -> Path:  # noqa: F811
    """The test's "container": the moved absolute paths live here. For the Go runner the
    image's programs are forgers that leave a mark: its steps must never run them."""
    fs = runner.root.parent / "fs"
    fs.mkdir(exist_ok=True)
    if len(runner.argv) > 1:  # runner.sh: the image's programs do the steps
        if "busybox" in runner.argv[0]:  # as an Alpine image with bash added
            extra = runner.root.parent / "bash"
            extra.mkdir()
            (extra / "bash").symlink_to("/bin/bash")
            runner.env["PATH"] = f"{runner.env['PATH']}:{extra}"
        return fs
    forgers = runner.root.parent / "forgers"
    forgers.mkdir()
    for name in FORGED:
        (forgers / name).write_text(f"#!/bin/sh\ntouch {fs}/FORGED-{name}\nexit 1\n")
        (forgers / name).chmod(0o755)
    runner.env["PATH"] = f"{forgers}:{runner.env['PATH']}"
    return fs


def _run(runner: Runner, fs: Path, phase: PhaseSpec) -> PhaseStatus:  # noqa: F811
    bundle = _bundle(phase, fs, runner.root)
    res = runner.run("launch", "p", str(len(bundle)), "262144", launch_key("t", 1, "p"),
                     stdin=bundle)
    assert res.returncode == 0, res.stderr
    parse_runner_output(res.stdout.decode())
    result = runner.wait("p", timeout=30)
    assert not list(fs.glob("FORGED-*")), f"an image program ran: {list(fs.glob('FORGED-*'))}"
    return result


def _tree(top: Path) -> dict[str, tuple[str, int, bytes | None]]:
    """Each entry under TOP: kind, permission bits, contents of a file."""
    out = {}
    for path in sorted(top.rglob("*")):
        st = path.lstat()
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) \
            else "file"
        out[str(path.relative_to(top))] = (kind, stat.S_IMODE(st.st_mode),
                                           path.read_bytes() if kind == "file" else None)
    return out


def test_the_oracle_s_solution_replaces_what_was_there(runner: Runner, fs: Path) -> None:  # noqa: F811
    (fs / "solution" / "old").mkdir(parents=True)
    (fs / "logs" / "agent").mkdir(parents=True)
    result = _run(runner, fs, PhaseSpec(
        name="agent", script=OracleScript("solve.sh"),
        payload={"solution/solve.sh": b"#!/bin/sh\necho solved\n",
                 "solution/data/x.txt": b"x\n"}))
    assert result.exit_code == 0, result.output
    assert _tree(fs / "solution") == {
        "data": ("dir", 0o755, None), "data/x.txt": ("file", 0o644, b"x\n"),
        "solve.sh": ("file", 0o755, b"#!/bin/sh\necho solved\n")}
    assert (fs / "logs" / "agent" / "oracle.txt").read_text() == "solved\n"


def test_the_verifier_s_stale_files_go_and_its_tests_and_hooks_run(
        runner: Runner, fs: Path) -> None:  # noqa: F811
    verifier = fs / "logs" / "verifier"
    verifier.mkdir(parents=True)
    (verifier / "reward.txt").write_text("1\n")  # forged ahead of the test
    (fs / "tests" / "old.py").parent.mkdir()
    (fs / "tests" / "old.py").write_text("stale")
    (fs / "solution").mkdir()
    hook = VerifierCollectConfig(command=f"echo collected > {fs}/hooked; exit 3",
                                 timeout_sec=10)
    slow = VerifierCollectConfig(command=f"sleep 30; touch {fs}/late", timeout_sec=1)
    result = _run(runner, fs, PhaseSpec(
        name="verifier", script=VerifyScript("test.sh", (hook, slow), True),
        payload={"tests/test.sh": f"#!/bin/sh\n[ -e {verifier}/reward.txt ] && echo 1 > "
                                  f"{fs}/saw-stale\necho 0 > {verifier}/reward.txt\n".encode()}))
    assert result.exit_code == 0, result.output
    assert (verifier / "reward.txt").read_text() == "0\n"
    assert not (fs / "saw-stale").exists()
    assert [(p.name, stat.S_IMODE(p.stat().st_mode)) for p in (fs / "tests").iterdir()] == [
        ("test.sh", 0o755)]
    assert not (fs / "solution").exists()
    assert (fs / "hooked").read_text() == "collected\n"
    assert not (fs / "late").exists()
    assert result.output.count("collect hook failed (ignored)") == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_step_s_workdir_files_are_merged_into_its_folder_and_given_to_its_user(
        runner: Runner, fs: Path) -> None:  # noqa: F811
    work = fs / "app"
    (work / "keep").mkdir(parents=True)
    (fs / "logs" / "agent").mkdir(parents=True)
    (fs / "logs" / "agent" / "old.log").write_text("previous step")
    nobody = pwd.getpwnam("nobody").pw_uid
    runner.cwd = work  # the exec's folder: the container's workdir
    result = _run(runner, fs, PhaseSpec(
        name="setup", cwd=str(work),
        script=SetupScript(False, ("src/main.py", "setup.sh"), "nobody"),
        payload={"workdir/src/main.py": b"print()\n", "workdir/setup.sh": b"true\n"}))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in work.iterdir()) == ["keep", "setup.sh", "src"]
    assert (work / "src" / "main.py").stat().st_uid == nobody
    assert (work / "src").stat().st_uid == nobody
    assert (work / "keep").stat().st_uid == 0
    assert list((fs / "logs" / "agent").iterdir()) == []
    assert stat.S_IMODE((fs / "logs" / "agent").stat().st_mode) == 0o1777


def _tar(entries: dict[str, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o640
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_separate_verifier_gets_each_artifact_at_its_own_path(
        runner: Runner, fs: Path) -> None:  # noqa: F811
    out = fs / "app" / "out"
    out.mkdir(parents=True)
    (out / "image-own.txt").write_text("kept")
    (fs / "app" / "report.txt").mkdir()  # replaced by the artifact file
    clean = clean_artifacts(_tar({"app/out": None, "app/out/a.txt": b"a",
                                  "app/out/sub": None, "app/out/sub/b.txt": b"b",
                                  "app/report.txt": b"report"}),
                            ["/app/out", "/app/report.txt"])
    result = _run(runner, fs, PhaseSpec(
        name="verifier-environment",
        script=VerifierEnvironmentScript((f"{fs}/app/out", f"{fs}/app/report.txt")),
        payload={"artifacts.tar": _moved_tar(clean.tar, fs)}))
    assert result.exit_code == 0, result.output
    assert _tree(out) == {"a.txt": ("file", 0o640, b"a"), "image-own.txt": ("file", 0o644, b"kept"),
                          "sub": ("dir", 0o755, None), "sub/b.txt": ("file", 0o640, b"b")}
    assert (fs / "app" / "report.txt").read_bytes() == b"report"
    for d in ("verifier", "agent", "artifacts"):
        assert stat.S_IMODE((fs / "logs" / d).stat().st_mode) == 0o1777


def _moved_tar(data: bytes, fs: Path) -> bytes:
    """The operator's artifacts tar with its names under the test's folder."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src:
            body = src.extractfile(m) if m.isreg() else None
            m.name = f"{str(fs).strip('/')}/{m.name}"
            dst.addfile(m, body)
    return out.getvalue()


def test_the_collect_phase_packs_the_artifacts_less_their_excludes(
        runner: Runner, fs: Path) -> None:  # noqa: F811
    out = fs / "app" / "out"
    (out / "sub" / "__pycache__").mkdir(parents=True)
    (out / "a.txt").write_text("a")
    (out / "b.pyc").write_text("b")
    (out / "sub" / "__pycache__" / "c").write_text("c")
    (out / "sub" / "d.txt").write_text("d")
    (fs / "app" / "f.txt").write_text("f")
    (fs / "data").mkdir()
    (fs / "data" / "z.txt").write_text("z")
    (fs / "app" / "linked").symlink_to(fs / "data")  # a link on its path: not collected
    hook = VerifierCollectConfig(command=f"echo from-hook > {out}/hook.txt", timeout_sec=10)
    artifacts = (ArtifactConfig(source=f"{fs}/app/out", exclude=["*.pyc", "__pycache__"]),
                 ArtifactConfig(source=f"{fs}/app/f.txt"),
                 ArtifactConfig(source=f"{fs}/app/linked"),
                 ArtifactConfig(source=f"{fs}/app/missing"))
    result = _run(runner, fs, PhaseSpec(name="collect", script=CollectScript((hook,),
                                                                             artifacts)))
    assert result.exit_code == 0, result.output
    got = runner.run("artifacts", "1000000")
    assert "a link on its path, not collected" in result.output
    assert got.returncode == 0, got.stderr
    rel = str(fs).strip("/")
    members = {}
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        for m in tar:
            name = "/".join(p for p in m.name.split("/") if p not in ("", "."))
            reader = tar.extractfile(m) if m.isreg() else None
            members[name.removeprefix(rel + "/")] = reader.read() if reader else None
    if "busybox" in runner.argv[0]:
        # runner.sh packs with the image's tar: busybox's (Debian's build) has no --exclude, so
        # a folder with exclude patterns is not packed on such an image; Go needs no tar.
        assert members == {"app/f.txt": b"f"}
        return
    assert members == {"app/out": None, "app/out/a.txt": b"a", "app/out/hook.txt": b"from-hook\n",
                       "app/out/sub": None, "app/out/sub/d.txt": b"d", "app/f.txt": b"f"}


def test_the_healthcheck_loop_waits_for_its_check_and_fails_after_its_retries(
        runner: Runner, fs: Path) -> None:  # noqa: F811
    ready = fs / "ready"
    check = HealthcheckConfig(command=f"test -f {ready}", interval_sec=0.1, timeout_sec=5,
                              retries=3, start_period_sec=0, start_interval_sec=0.1)
    failed = _run(runner, fs, PhaseSpec(name="healthcheck", script=HealthcheckScript(check)))
    assert failed.exit_code == 1
    assert f"Healthcheck failed after 3 consecutive retries: test -f {ready}" in failed.output
    ready.touch()
    runner.root.joinpath("state", "p").rename(runner.root / "state" / "p-first")
    passed = _run(runner, fs, PhaseSpec(name="healthcheck", script=HealthcheckScript(check)))
    assert passed.exit_code == 0, passed.output


@pytest.fixture
def listening() -> Iterator[str]:
    """ip:port of a socket that accepts connections (a policy not yet in force)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def _closed() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()  # refused, as under a policy that rejects
    return address


def test_the_fence_lets_a_pod_s_first_phase_go_on_once_nothing_answers(
        runner: Runner, fs: Path) -> None:  # noqa: F811
    fence = Fence((_closed(),), 5)
    result = _run(runner, fs, PhaseSpec(name="environment", id="p", fence=fence,
                                        script=EnvironmentScript(None, False)))
    assert result.exit_code == 0, result.output
    assert (fs / "logs" / "verifier").is_dir()


def test_the_fence_fails_the_phase_naming_the_address_still_reached(
        runner: Runner, fs: Path, listening: str) -> None:  # noqa: F811
    fence = Fence((_closed(), listening), 1)
    began = time.monotonic()
    result = _run(runner, fs, PhaseSpec(name="environment", id="p", fence=fence,
                                        script=EnvironmentScript(None, False)))
    assert result.exit_code != 0
    assert FENCE_MARK in result.output and f"apiserver at {listening}" in result.output
    assert time.monotonic() - began >= 0.9
    assert not (fs / "logs").exists()  # nothing after the fence ran
    assert result.output.startswith(f"shipyard runner: preparing phase p failed: fence "
                                    f"{FENCE_MARK}"), result.output


def test_an_offline_phase_s_fence_comes_before_its_own_steps_and_command(
        runner: Runner, fs: Path, listening: str) -> None:  # noqa: F811
    ran = fs / "agent-ran"
    fence = Fence((listening,), 1, "the cluster DNS")
    result = _run(runner, fs, PhaseSpec(name="agent", id="p", fence=fence,
                                        script=CommandAgentScript(f"touch {ran}")))
    assert result.exit_code != 0 and not ran.exists()
    assert f"reached the cluster DNS at {listening}" in result.output


def test_artifacts_not_packed_are_packed_when_asked_with_their_items(
        runner: Runner, fs: Path) -> None:  # noqa: F811
    """A trial that ended before its verification: the Go runner packs what the collection
    would have (runner.sh ignores the items: nothing packed, as before)."""
    (fs / "logs" / "artifacts").mkdir(parents=True)
    (fs / "logs" / "artifacts" / "note.txt").write_text("left by the agent")
    items = recovery_items((ArtifactConfig(source=f"{fs}/logs/artifacts"),))
    got = runner.run("artifacts", "1000000", items)
    if len(runner.argv) > 1:
        assert got.returncode == 4
        return
    assert got.returncode == 0, got.stderr
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        names = {m.name.rstrip("/").rsplit("/", 1)[-1]: m for m in tar}
        assert tar.extractfile(names["note.txt"]).read() == b"left by the agent"  # type: ignore[union-attr]
    (fs / "logs" / "artifacts" / "later.txt").write_text("x")  # packed once: the same tar
    assert runner.run("artifacts", "1000000", items).stdout == got.stdout
    assert runner.run("artifacts", "1000000", "not base64!").returncode == 0  # packed already
