"""Every trial's artifacts in the export, as Harbor 0.25 writes them (issue 26): `artifacts/`
with the `/logs/artifacts` convention folder and the task's declared artifacts, and
`artifacts/manifest.json`, for a shared verifier and a separate one; what an agent planted
(a link, a FIFO, a device) is left out and said, never followed; artifacts over the size
limit are refused with a message naming the limit. The opt-in test reads the export with
Harbor's own models and viewer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shipyard.runtime.trial_executor import ARTIFACT_LIMIT
from tests.e2e.conftest import TASK_IMAGE
from tests.e2e.test_cli import ok, shipyard_cli
from tests.e2e.test_sweeps import BUSYBOX, create_sweep, wait_sweep
from tests.harbor_venv import VIEWER_CLIENT, harbor_python, harbor_view

ARTIFACTS = ('artifacts = ["/app/out.txt", {source = "/app/results", destination = "res", '
             'exclude = ["*.tmp"]}, "/app/missing.txt", "/app/etc"]\n')
SOLVE = """#!/bin/sh
mkdir -p /app/results /logs/artifacts/sub
echo report > /logs/artifacts/report.txt
echo nested > /logs/artifacts/sub/b.txt
echo out > /app/out.txt
echo r1 > /app/results/r1.txt
echo tmp > /app/results/skip.tmp
ln -s /etc/passwd /logs/artifacts/passwd-link
ln -s /etc /app/etc
mkfifo /logs/artifacts/fifo
mknod /logs/artifacts/null c 1 3 2>/dev/null || true
echo ok > /tmp/out
"""
TEST = ("#!/bin/sh\nif grep -q ok /tmp/out; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n")
SEPARATE_TEST = ("#!/bin/sh\nif [ \"$(cat /app/out.txt)\" = out ]; then echo 1; else echo 0; fi"
                 " > /logs/verifier/reward.txt\n")
BIG = ("#!/bin/sh\ndd if=/dev/zero of=/logs/artifacts/big.bin bs=1048576 count=40 2>/dev/null\n"
       "echo ok > /tmp/out\n")


def task(name: str, toml: str, solve: str, test: str) -> dict[str, Any]:
    return {"apiVersion": "shipyard.dev/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"source": {"inline": {"files": {
                "task.toml": toml, "instruction.md": "Publish your results.\n",
                "solution/solve.sh": solve, "tests/test.sh": test}}}}}


@pytest.fixture(scope="module")
def exported(cluster, crds, operator, custom_objects, core_v1, tmp_path_factory
             ) -> Iterator[tuple[Path, str, dict[str, Any]]]:
    """One Sweep (oracle) over a shared-verifier task, a separate-verifier task and one whose
    artifacts are over the limit (on busybox), exported with `sweep results -o`."""
    import uuid

    from kubernetes import client

    from tests.conftest import TEST_NAMESPACE_LABEL, TEST_NAMESPACE_PREFIX

    ns = f"{TEST_NAMESPACE_PREFIX}-artx-{uuid.uuid4().hex[:6]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=ns, labels={TEST_NAMESPACE_LABEL: "true"})))
    # Debian's GNU tar packs a folder with `exclude` patterns (busybox's tar has no --exclude)
    env = f'[environment]\ndocker_image = "{TASK_IMAGE}"\n'
    try:
        for body in (
            task("arts", ARTIFACTS + env, SOLVE, TEST),
            task("artsep", ARTIFACTS + '[verifier]\nenvironment_mode = "separate"\n' + env,
                 SOLVE, SEPARATE_TEST),
            task("artbig", f'[environment]\ndocker_image = "{BUSYBOX}"\n', BIG, TEST),
        ):
            custom_objects.create_namespaced_custom_object("shipyard.dev", "v1alpha1", ns,
                                                           "tasks", body)
        create_sweep(custom_objects, ns, "arty", tasks={"names": ["arts", "artsep", "artbig"]},
                     agents=[{"name": "oracle"}], attempts=1, parallelism=3)
        sweep = wait_sweep(custom_objects, ns, "arty", lambda s: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (s.get("status") or {}).get("conditions") or []), timeout=600)
        jobs = tmp_path_factory.mktemp("artx") / "jobs"
        result = shipyard_cli(cluster, "sweep", "results", "arty", "-o", str(jobs), "-n", ns)
        ok(result)
        yield jobs, result.stderr, sweep
    finally:
        core_v1.delete_namespace(ns)


def trial_dirs(jobs: Path) -> dict[str, Path]:
    found = {}
    for trial_dir in (p for p in (jobs / "arty").iterdir() if p.is_dir()):
        result = json.loads((trial_dir / "result.json").read_text())
        found[result["task_name"]] = trial_dir
    return found


def manifest(trial_dir: Path) -> list[dict[str, Any]]:
    return json.loads((trial_dir / "artifacts" / "manifest.json").read_text())


def row(source: str, destination: str, kind: str, status: str,
        exclude: list[str] | None = None) -> dict[str, Any]:
    return {"source": source, "destination": destination, "type": kind, "status": status,
            "service": None, "exclude": exclude or []}


EXPECTED_MANIFEST = [
    row("/logs/artifacts", "artifacts/logs/artifacts", "directory", "ok"),
    row("/app/out.txt", "artifacts/app/out.txt", "file", "ok"),
    row("/app/results", "artifacts/res", "directory", "ok", ["*.tmp"]),
    row("/app/missing.txt", "artifacts/app/missing.txt", "file", "failed"),
    row("/app/etc", "artifacts/app/etc", "file", "failed"),  # a link: not followed
]


@pytest.mark.parametrize("name", ["arts", "artsep"])
def test_every_trials_artifacts_are_exported_as_harbor_lays_them_out(exported, name) -> None:
    jobs, _, sweep = exported
    assert sweep["status"]["counts"]["completed"] == 3, sweep["status"]
    trial_dir = trial_dirs(jobs)[name]
    result = json.loads((trial_dir / "result.json").read_text())
    assert result["verifier_result"]["rewards"] == {"reward": 1}
    assert manifest(trial_dir) == EXPECTED_MANIFEST
    # Harbor's own bytes: json.dumps(rows, indent=2), no final newline
    text = (trial_dir / "artifacts" / "manifest.json").read_text()
    assert text == json.dumps(EXPECTED_MANIFEST, indent=2)
    art = trial_dir / "artifacts"
    assert (art / "logs/artifacts/report.txt").read_text() == "report\n"
    assert (art / "logs/artifacts/sub/b.txt").read_text() == "nested\n"
    assert (art / "app/out.txt").read_text() == "out\n"
    assert (art / "res/r1.txt").read_text() == "r1\n"
    assert not (art / "res/skip.tmp").exists()  # its exclude pattern
    files = sorted(str(p.relative_to(art)) for p in art.rglob("*"))
    assert files == ["app", "app/out.txt", "logs", "logs/artifacts", "logs/artifacts/report.txt",
                     "logs/artifacts/sub", "logs/artifacts/sub/b.txt", "manifest.json", "res",
                     "res/r1.txt"], files  # no link, FIFO or device
    assert not any(p.is_symlink() for p in art.rglob("*"))


def test_what_the_agent_planted_is_left_out_and_said(exported) -> None:
    jobs, stderr, _ = exported
    for name in ("arts", "artsep"):
        trial = trial_dirs(jobs)[name].name
        lines = [line for line in stderr.splitlines() if line.startswith(f"{trial}: ")]
        said = "\n".join(lines)
        assert "'logs/artifacts/passwd-link': a link: left out" in said, stderr
        assert "'logs/artifacts/fifo': not a regular file: left out" in said, stderr


def test_artifacts_over_the_limit_are_refused_with_a_message(exported) -> None:
    jobs, stderr, _ = exported
    trial_dir = trial_dirs(jobs)["artbig"]
    assert manifest(trial_dir) == [
        row("/logs/artifacts", "artifacts/logs/artifacts", "directory", "failed")]
    assert not (trial_dir / "artifacts" / "logs").exists()
    line = next(line for line in stderr.splitlines() if line.startswith(trial_dir.name))
    assert "no artifacts kept" in line and "over the limit" in line, stderr
    # the trial itself is scored as ever: collection never fails a trial
    result = json.loads((trial_dir / "result.json").read_text())
    assert result["verifier_result"]["rewards"] == {"reward": 1}


def test_a_shared_verifiers_artifacts_come_with_its_result_not_an_exec_of_their_own(
        exported, operator) -> None:
    """The exec that sees a shared verifier end brings its artifacts tar (the Go runner): its
    pod gets no `runner artifacts` exec (a trivial trial: one exec, the environment, agent and
    verifier chained; runner.sh: two, the verifier's launch apart); runner.sh's pods, and a
    separate verifier's environment pod (its collect phase), are still read by that exec."""
    ns = exported[2]["metadata"]["namespace"]
    execs: dict[str, list[str]] = {}
    for m in re.finditer(rf"exec {re.escape(ns)}/(\S+): \S*runner (.*)", operator.log()):
        execs.setdefault(m[1], []).append(m[2].strip())

    def launched(e: list[str], phase: str) -> bool:
        return any(x.startswith(f"launch {phase} ") or (x.startswith("chain ") and re.search(
            rf" {re.escape(phase)}:", x)) for x in e)

    shared = [p for p, e in execs.items() if launched(e, "verifier")
              and not launched(e, "collect") and not launched(e, "verifier-environment")]
    separate = [p for p, e in execs.items() if launched(e, "collect")]
    assert len(shared) == 2 and len(separate) == 1, execs  # arts and artbig; artsep
    read = f"artifacts {ARTIFACT_LIMIT}"
    go = os.environ.get("SHIPYARD_RUNNER", "go") != "sh"
    for pod in shared:
        assert sum(x.startswith(read) for x in execs[pod]) == (0 if go else 1), execs[pod]
        if go:  # the verifier chained after the agent, in the pod's first exec
            assert execs[pod][0].startswith("chain ") and "verifier:-" in execs[pod][0], execs
    assert sum(x.startswith(read) for x in execs[separate[0]]) == 1, execs


@pytest.mark.optin
def test_harbors_models_and_viewer_read_the_exported_artifacts(exported) -> None:
    """Harbor 0.25's `ArtifactManifestEntry` validates every row, and its viewer's artifacts
    endpoint (as `harbor view` serves it) lists the files and the manifest."""
    jobs, _, _ = exported
    python = harbor_python()
    with harbor_view(python, jobs) as base:
        check = subprocess.run([python, "-c", HARBOR_ARTIFACTS_CHECK, base, "arty", str(jobs)],
                               capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stderr[-3000:]
        seen = json.loads(check.stdout)
        by_task = {t["task"]: t for t in seen.values()}
        assert set(by_task) == {"arts", "artsep", "artbig"}
        for name in ("arts", "artsep"):
            assert by_task[name]["files"] == [
                "app/out.txt", "logs/artifacts/report.txt", "logs/artifacts/sub/b.txt",
                "res/r1.txt"], by_task[name]
            assert by_task[name]["statuses"] == ["ok", "ok", "ok", "failed", "failed"]
        assert by_task["artbig"]["statuses"] == ["failed"]


HARBOR_ARTIFACTS_CHECK = VIEWER_CLIENT + """
out = {}
for t in get(f"/api/jobs/{job}/trials?page_size=100")["items"]:
    name = t["name"]
    result = TrialResult.model_validate_json((jobs / job / name / "result.json").read_text())
    raw = json.loads((jobs / job / name / "artifacts" / "manifest.json").read_text())
    manifest = ArtifactManifest(entries=[ArtifactManifestEntry.model_validate(e) for e in raw])
    assert manifest.to_json_data() == raw, (manifest.to_json_data(), raw)
    a = get(f"/api/jobs/{job}/trials/{name}/artifacts")
    assert a["manifest"] == raw, a["manifest"]
    out[name] = {"task": result.task_name, "files": sorted(f["path"] for f in a["files"]),
                 "statuses": [e["status"] for e in a["manifest"]]}
print(json.dumps(out))
"""


def test_a_secret_the_agent_wrote_into_its_artifacts_is_not_exported(cluster, shipyard,
                                                                      tmp_path) -> None:
    """The runner redacts a secret phase's values in every file it changed before the
    artifacts are packed: `shipyard results TRIAL --output-dir` exports the files, not the
    value."""
    from kubernetes import client

    value = "sk-art-" + "7f3a9c1e5b" * 3
    shipyard.core.create_namespaced_secret(shipyard.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="model-key"), string_data={"MODEL_API_KEY": value}))
    shipyard.task("leak", task("leak", 'artifacts = ["/app/out.txt"]\n'
                               f'[environment]\ndocker_image = "{BUSYBOX}"\n', "", TEST)
                  ["spec"]["source"]["inline"]["files"])
    shipyard.trial("leak-command", "leak", {
        "name": "command", "envFrom": [{"secretRef": {"name": "model-key"}}],
        "command": 'mkdir -p /app; echo "key=$MODEL_API_KEY" > /logs/artifacts/key.txt; '
                   'echo "$MODEL_API_KEY" > /app/out.txt; echo ok > /tmp/out'})
    trial = shipyard.wait("leak-command", timeout=180)
    assert trial["status"]["phase"] == "Completed", trial["status"]
    out = tmp_path / "job"
    ok(shipyard_cli(cluster, "results", "leak-command", "-n", shipyard.namespace,
                    "--output-dir", str(out)))
    art = out / "leak-command" / "artifacts"
    assert [r["status"] for r in manifest(out / "leak-command")] == ["ok", "ok"]
    key = (art / "logs/artifacts/key.txt").read_text()
    assert key.startswith("key=") and value not in key, key
    exported = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    assert not [b for b in exported if value.encode() in b]
    assert (art / "app/out.txt").exists()


def _steps_files(separate: bool) -> dict[str, str]:
    """Two steps; each one's oracle writes its own name into the convention folder and into
    /app/out.txt, and its test checks /app/out.txt."""
    files = {"task.toml": (f'schema_version = "1.4"\nartifacts = ["/app/out.txt"]\n'
                           f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'
                           + ('[verifier]\nenvironment_mode = "separate"\n' if separate else "")
                           + "".join(f'[[steps]]\nname = "{s}"\n[steps.agent]\ntimeout_sec = 60\n'
                                     for s in ("first", "second")))}
    for step in ("first", "second"):
        files[f"steps/{step}/instruction.md"] = f"Step {step}.\n"
        files[f"steps/{step}/solution/solve.sh"] = (
            f"#!/bin/sh\nmkdir -p /logs/artifacts /app\necho {step} > /logs/artifacts/step.txt\n"
            f"echo {step} > /app/out.txt\n")
        files[f"steps/{step}/tests/test.sh"] = (
            f'#!/bin/sh\nif [ "$(cat /app/out.txt)" = {step} ]; then echo 1; else echo 0; fi'
            " > /logs/verifier/reward.txt\n")
    return files


@pytest.mark.parametrize("separate", [False, True], ids=["shared", "separate"])
def test_each_step_of_a_multi_step_trial_exports_its_own_artifacts(cluster, shipyard, tmp_path,
                                                                   separate) -> None:
    """As Harbor archives each step's under `steps/<step>/artifacts/`: the first step's
    artifacts are its own, not the last step's (which replaced them in the pod), with a
    manifest each."""
    name = "steps-sep" if separate else "steps-shared"
    shipyard.task(name, _steps_files(separate))
    shipyard.trial(name, name)
    trial = shipyard.wait(name, timeout=300)
    assert trial["status"].get("reward") == 1.0, trial["status"]
    out = tmp_path / "job"
    ok(shipyard_cli(cluster, "results", name, "-n", shipyard.namespace,
                    "--output-dir", str(out)))
    for step in ("first", "second"):
        base = out / name / "steps" / step / "artifacts"
        assert (base / "logs/artifacts/step.txt").read_text() == f"{step}\n", step
        assert (base / "app/out.txt").read_text() == f"{step}\n", step
        rows = json.loads((base / "manifest.json").read_text())
        assert [(r["source"], r["status"]) for r in rows] == [
            ("/logs/artifacts", "ok"), ("/app/out.txt", "ok")], rows


@pytest.mark.parametrize("separate", [False, True], ids=["shared", "separate"])
def test_a_trial_cancelled_before_its_verification_still_exports_its_artifacts(
        cluster, shipyard, tmp_path, separate) -> None:
    """Harbor collects a trial's artifacts best effort when it ends before verification (an
    agent's exception, a cancellation): the environment pod packs them at the trial's end."""
    toml = ('artifacts = ["/app/out.txt", "/app/missing.txt"]\n'
            + ('[verifier]\nenvironment_mode = "separate"\n' if separate else "")
            + f'[environment]\ndocker_image = "{TASK_IMAGE}"\n')
    shipyard.task("stopped", task("stopped", toml, "", TEST)["spec"]["source"]["inline"]["files"])
    shipyard.trial("stopped-agent", "stopped", {
        "name": "command",
        "command": "mkdir -p /app /logs/artifacts; echo partial > /logs/artifacts/note.txt; "
                   "echo out > /app/out.txt; touch /tmp/written; sleep 300"})
    shipyard.wait("stopped-agent", timeout=120, until=lambda t: any(
        p["name"] == "agent" and p.get("startedAt")
        for p in (t.get("status") or {}).get("phases", [])))
    pod = shipyard.get("trials", "stopped-agent")["status"]["podName"]
    deadline = time.monotonic() + 60
    while cluster.kubectl_run("exec", "-n", shipyard.namespace, pod, "-c", "main", "--",
                              "test", "-e", "/tmp/written", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the agent never wrote its artifacts"
        time.sleep(0.5)
    shipyard.api.patch_namespaced_custom_object(
        "shipyard.dev", "v1alpha1", shipyard.namespace, "trials", "stopped-agent",
        {"metadata": {"annotations": {"shipyard.dev/cancel": "true"}}})
    trial = shipyard.wait("stopped-agent", timeout=120)
    cancelled = next(c for c in trial["status"]["conditions"] if c["type"] == "Failed")
    assert cancelled["reason"] == "Cancelled", trial["status"]
    out = tmp_path / "job"
    ok(shipyard_cli(cluster, "results", "stopped-agent", "-n", shipyard.namespace,
                    "--output-dir", str(out)))
    assert manifest(out / "stopped-agent") == [
        row("/logs/artifacts", "artifacts/logs/artifacts", "directory", "ok"),
        row("/app/out.txt", "artifacts/app/out.txt", "file", "ok"),
        row("/app/missing.txt", "artifacts/app/missing.txt", "file", "failed")]
    art = out / "stopped-agent" / "artifacts"
    assert (art / "logs/artifacts/note.txt").read_text() == "partial\n"
    assert (art / "app/out.txt").read_text() == "out\n"
