"""docker-compose services as the containers of one trial pod (issue 25): the plan, the
rendered pod, the images and the observation of a service that does not start."""

from __future__ import annotations

from pathlib import Path

import yaml

from shipyard.plan.compose import StartupProbe, compose_pod, startup_probe, volume_name
from shipyard.plan.images import ImageSettings, context_files, image_needs
from shipyard.reconcile.pod_observation import observe_pod
from shipyard.taskformat import load_task_dir, load_task_files
from shipyard.taskformat.compose import Healthcheck, load_compose
from tests.golden import assert_golden
from tests.unit.helpers import REPO, trial_body
from tests.unit.render.test_pod import build_environment_pod

GOLDEN = Path(__file__).parent / "golden"
EXAMPLE = REPO / "examples" / "compose" / "task"
BUILDKIT = ImageSettings(backend="buildkit", registry="reg/x")
NOTES_IMAGE = "reg/x/compose-notes:abc"


def _pod(loaded=None, images=None, **spec):
    from shipyard.plan.phases import build_plan
    from tests.unit.helpers import trial_spec

    loaded = loaded or load_task_dir(EXAMPLE)
    plan = build_plan(loaded, trial_spec(agent={"name": "oracle"}, **spec), {},
                      images=images or {"service.notes": NOTES_IMAGE})
    return build_environment_pod(trial_body(name="compose-oracle", task_name="compose",
                                            agent={"name": "oracle"}), plan)


def _compose_task(compose: str, **files: bytes):
    """A minimal task of this compose file and `files`."""
    return load_task_files({
        "task.toml": b'schema_version = "1.4"\n',
        "instruction.md": b"x\n",
        "tests/test.sh": b"#!/bin/bash\n",
        "solution/solve.sh": b"#!/bin/bash\n",
        "environment/docker-compose.yaml": compose.encode(),
        **files,
    }, name="t")


def test_golden_compose_example_pod():
    rendered = ("# The environment pod of examples/compose with the oracle agent\n"
                "# (tests/unit/render/test_compose.py). Regenerate: SHIPYARD_UPDATE_GOLDEN=1 "
                ".venv/bin/pytest tests/unit/render/test_compose.py -k golden\n"
                + yaml.safe_dump(_pod(), sort_keys=False))
    from shipyard.render.pod import runner_configmap_name

    rendered = rendered.replace(runner_configmap_name(), "shipyard-runner-<digest>")
    assert_golden(GOLDEN / "compose-oracle-pod.yaml", rendered)


def test_the_sidecar_is_a_native_sidecar_with_its_healthcheck_as_startup_probe():
    pod = _pod()
    [notes] = pod["spec"]["initContainers"]
    assert notes["name"] == "notes" and notes["restartPolicy"] == "Always"
    assert notes["image"] == NOTES_IMAGE
    assert notes["args"] == ["python3", "/srv/notes.py", "8080"] and "command" not in notes
    assert {"name": "NOTES_DIR", "value": "/data"} in notes["env"]
    probe = notes["startupProbe"]
    assert probe["exec"]["command"][:2] == ["python3", "-c"] and probe["exec"]["command"][-1] \
        == "8080"
    assert (probe["periodSeconds"], probe["timeoutSeconds"], probe["failureThreshold"]) == \
        (1, 2, 30)
    assert notes["resources"] == {"requests": {"memory": "128Mi"},
                                  "limits": {"memory": "128Mi"}}
    assert notes["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in notes["securityContext"]
    assert notes["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["spec"]["hostAliases"] == [{"ip": "127.0.0.1", "hostnames": ["main", "notes"]}]
    data = volume_name("vol", "notes-data")
    assert {"name": data, "emptyDir": {}} in pod["spec"]["volumes"]
    assert notes["volumeMounts"] == [{"name": data, "mountPath": "/data"}]
    main = pod["spec"]["containers"][0]
    assert main["name"] == "main"
    assert {"name": "NOTES_URL", "value": "http://notes:8080"} in main["env"]


def test_startup_probe_counts_the_start_period():
    assert startup_probe(Healthcheck(("true",), 2.0, 0.5, 3, 9.0)) == StartupProbe(
        ("true",), 2, 1, 3 + 5)


def test_startup_probe_holds_huge_durations_and_retries_within_int32():
    """`interval: 1000000000h` and a billion-billion retries: Kubernetes' probe fields are
    int32, and the pod would be refused."""
    probe = startup_probe(Healthcheck(("true",), 3.6e12, 3.6e12, 10**18, 3.6e12))
    assert probe == StartupProbe(("true",), 365 * 86400, 365 * 86400, 2**31 - 1)


def test_log_binds_are_shared_with_main_and_one_shot_services_complete():
    compose = """\
services:
  main:
    image: x
    volumes: ['${HOST_ARTIFACTS_PATH}:${ENV_ARTIFACTS_PATH}']
    depends_on: {seed: {condition: service_completed_successfully}}
  seed:
    image: s
    user: "1000:1000"
    command: sh -c 'echo seeded > /out/seed.txt'
    volumes: ['${HOST_ARTIFACTS_PATH}:/out', '/scratch']
    healthcheck: {test: 'true'}
"""
    loaded = _compose_task(compose)
    env = load_compose(loaded)
    assert env is not None
    pod = compose_pod(env, {})
    [seed] = pod.sidecars
    assert seed.one_shot and seed.startup_probe is None
    assert (seed.run_as_user, seed.run_as_group) == (1000, 1000)
    assert seed.args == ("sh", "-c", "echo seeded > /out/seed.txt")
    logs = volume_name("logs", "artifacts")
    assert next(m.volume for m in seed.mounts) == logs
    assert [(m.volume, m.path) for m in pod.main_mounts] == [(logs, "/logs/artifacts")]
    rendered = _pod(loaded, images={"environment": "x", "service.seed": "s"})
    [init] = [c for c in rendered["spec"]["initContainers"] if c["name"] == "seed"]
    assert "restartPolicy" not in init and init["securityContext"]["runAsUser"] == 1000


def test_sidecar_builds_are_image_needs_one_per_context():
    loaded = load_task_dir(EXAMPLE)
    needs = {n.role: n for n in image_needs(loaded, BUILDKIT)}
    assert needs["environment"].ref == "localhost/shipyard/debian:bookworm"
    notes = needs["service.notes"]
    assert notes.build and notes.context_dir == "environment/notes/"
    assert notes.ref == f"reg/x/compose-notes:{notes.context_hash}"
    assert sorted(context_files(loaded, notes)) == ["Dockerfile", "notes.py"]


def test_another_dockerfile_is_sent_as_the_dockerfile_and_main_may_be_built():
    files = {
        "task.toml": b'schema_version = "1.4"\n',
        "instruction.md": b"x\n",
        "tests/test.sh": b"#!/bin/bash\n",
        "environment/docker-compose.yaml":
            b"services:\n  main: {build: {context: agent}}\n"
            b"  db: {build: {context: ., dockerfile: db.Dockerfile}}\n",
        "environment/agent/Dockerfile": b"FROM debian:bookworm\n",
        "environment/db.Dockerfile": b"FROM python:3.12-slim\n",
    }
    loaded = load_task_files(files, name="t")
    needs = {n.role: n for n in image_needs(loaded, BUILDKIT)}
    assert needs["environment"].context_dir == "environment/agent/"
    db = needs["service.db"]
    assert context_files(loaded, db)["Dockerfile"] == b"FROM python:3.12-slim\n"


def _status(**init: object) -> dict:
    spec = {"initContainers": [{"name": "db", "restartPolicy": "Always",
                                "startupProbe": {"failureThreshold": 3, "periodSeconds": 1}}],
            "containers": [{"name": "main"}]}
    return {"metadata": {"name": "p"}, "spec": spec,
            "status": {"phase": "Pending", "initContainerStatuses": [{"name": "db", **init}],
                       "containerStatuses": [{"name": "main", "state": {"waiting": {}}}]}}


def test_a_sidecar_that_never_becomes_healthy_is_named_with_its_log():
    ended = {"exitCode": 143, "reason": "Error", "message": "starting\nlistening on 8080\n"}
    seen = observe_pod(_status(restartCount=1, lastState={"terminated": ended},
                               state={"running": {}}))
    assert seen.service_failure is not None
    assert seen.service_failure.startswith(
        "service db never became healthy: its healthcheck failed 3 times, every 1 s")
    assert seen.service_failure.endswith("starting\nlistening on 8080")
    crashed = observe_pod(_status(restartCount=1, state={"running": {}}, lastState={
        "terminated": {"exitCode": 2, "reason": "Error"}}))
    assert crashed.service_failure == ("service db exited with code 2 (Error); the end of its "
                                       "log:\n(no output)")
    assert observe_pod(_status(restartCount=0, state={"running": {}})).service_failure is None


def _tar(entries: dict[str, bytes | None]) -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_sidecar_artifacts_are_merged_at_their_original_paths():
    import io
    import tarfile

    from shipyard.render.compose import merge_sidecar_tars, sidecar_artifact_argv
    from shipyard.taskformat import ArtifactConfig

    data = ArtifactConfig(source="/data", service="db", exclude=["*.tmp"])
    dump = ArtifactConfig(source="/tmp/.dump.sql", service="db")
    argv = sidecar_artifact_argv(data)
    assert argv[:2] == ["sh", "-c"] and "--exclude='*.tmp'" in argv[2]
    merged = merge_sidecar_tars([
        (data, _tar({".": None, "./greeting": b"good", "./sub": None, "./sub/x": b"x",
                     "./../escape": b"no"})),
        (dump, _tar({".dump.sql": b"rows"})),
        (ArtifactConfig(source="/data/greeting", service="db"), _tar({"greeting": b"late"})),
        (ArtifactConfig(source="/missing", service="db"), b""),
    ])
    with tarfile.open(fileobj=io.BytesIO(merged)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert files == {"data/greeting": b"good", "data/sub/x": b"x", "tmp/.dump.sql": b"rows"}


def test_sidecar_evidence_is_grouped_by_service_hooks_first():
    from shipyard.plan.compose import sidecar_evidence
    from shipyard.taskformat import ArtifactConfig, VerifierCollectConfig

    hooks = [VerifierCollectConfig(command="dump", service="db"),
             VerifierCollectConfig(command="main-only")]
    artifacts = [ArtifactConfig(source="/logs/artifacts"), ArtifactConfig(source="/x",
                                                                          service="api"),
                 ArtifactConfig(source="/d", service="db")]
    [db, api] = sidecar_evidence(hooks, artifacts)
    assert (db.service, [h.command for h in db.hooks], [a.source for a in db.artifacts]) == (
        "db", ["dump"], ["/d"])
    assert (api.service, api.hooks, [a.source for a in api.artifacts]) == ("api", (), ["/x"])


def test_a_shared_verifier_gets_its_sidecar_evidence_and_runs_only_main_s_hooks_itself():
    from shipyard.plan.phases import VerifyScript, build_plan
    from tests.unit.helpers import trial_spec

    files = {str(p.relative_to(EXAMPLE)): p.read_bytes() for p in EXAMPLE.rglob("*")
             if p.is_file()}
    files["task.toml"] = files["task.toml"].replace(
        b'schema_version = "1.4"\n',
        b'schema_version = "1.4"\nartifacts = [{ source = "/data", service = "notes" }]\n'
    ).replace(b"[environment]\n", (
        b'[[verifier.collect]]\ncommand = "ls /data > /data/listing"\nservice = "notes"\n'
        b'[[verifier.collect]]\ncommand = "echo main"\n'
        b"[environment]\n"), 1)
    loaded = load_task_files(files, name="compose")
    plan = build_plan(loaded, trial_spec(agent={"name": "oracle"}), {},
                      images={"service.notes": NOTES_IMAGE})
    [evidence] = plan.steps[0].sidecar_evidence
    assert evidence.service == "notes" and [h.command for h in evidence.hooks] == [
        "ls /data > /data/listing"]
    assert [a.source for a in evidence.artifacts] == ["/data"]
    verify = plan.phase("verifier").script
    assert isinstance(verify, VerifyScript)
    assert [h.command for h in verify.hooks] == ["echo main"]  # the sidecar's runs in it


def test_binds_of_task_files_are_read_only_configmap_volumes_made_before_the_pod():
    """Harbor's project directory is environment/: `./setup.json` is the task's file there.
    A pod has no such host directory, so the files reach it in one immutable ConfigMap named
    by their content: a bound file by its subPath, a bound folder whole, read-only."""
    import base64

    from shipyard.render.compose import task_files_configmaps

    compose = """\
services:
  main:
    image: x
    volumes: ['./fixtures:/app/fixtures']
    depends_on: {stack: {condition: service_healthy}}
  stack:
    image: s
    volumes: ['./setup.json:/task/setup.json:ro', '${CONTEXT_DIR}/fixtures/b/c.sh:/c.sh',
              './nothing-here:/empty']
    healthcheck: {test: ['CMD', 'true']}
"""
    loaded = _compose_task(compose, **{
        "environment/setup.json": b'{"seed": 7}\n',
        "environment/fixtures/a.txt": b"a\n",
        "environment/fixtures/b/c.sh": b"#!/bin/sh\necho c\n",
    })
    rendered = _pod(loaded, images={"environment": "x", "service.stack": "s"})
    volumes = {v["name"]: v for v in rendered["spec"]["volumes"]}
    [stack] = [c for c in rendered["spec"]["initContainers"] if c["name"] == "stack"]
    [main] = [c for c in rendered["spec"]["containers"] if c["name"] == "main"]
    mounts = {m["mountPath"]: m for m in stack["volumeMounts"] + main["volumeMounts"]}
    setup, script, folder = mounts["/task/setup.json"], mounts["/c.sh"], mounts["/app/fixtures"]
    assert setup["readOnly"] and setup["subPath"] == "setup.json"
    assert script["readOnly"] and script["subPath"] == "c.sh"
    assert folder["readOnly"] and "subPath" not in folder
    assert "emptyDir" in volumes[mounts["/empty"]["name"]]  # as Docker makes a missing source
    folder_cm = volumes[folder["name"]]["configMap"]
    assert sorted(i["path"] for i in folder_cm["items"]) == ["a.txt", "b/c.sh"]
    assert folder_cm["defaultMode"] == 0o755

    from shipyard.plan.phases import build_plan
    from tests.unit.helpers import trial_spec

    plan = build_plan(loaded, trial_spec(agent={"name": "oracle"}), {},
                      images={"environment": "x", "service.stack": "s"})
    configmaps = task_files_configmaps("ns", plan.environment.compose)
    by_name = {c["metadata"]["name"]: c for c in configmaps}
    assert len(by_name) == 3 and all(c["immutable"] for c in configmaps)
    held = by_name[folder_cm["name"]]
    contents = {i["path"]: base64.b64decode(held["binaryData"][i["key"]])
                for i in folder_cm["items"]}
    assert contents == {"a.txt": b"a\n", "b/c.sh": b"#!/bin/sh\necho c\n"}
    # Named by content: the same files are the same ConfigMap, other files another.
    again = build_plan(loaded, trial_spec(agent={"name": "nop"}), {},
                       images={"environment": "x", "service.stack": "s"})
    assert task_files_configmaps("ns", again.environment.compose) == configmaps


def test_no_container_of_the_pod_holds_a_superset_of_anothers_capabilities() -> None:
    """The kernel lets a process of the same uid read another's /proc/PID/environ and root when
    the other's permitted capabilities are a subset of its own: a root sidecar (the task's code)
    must not hold all of main's (the agent's keys are in its environment), main not all of a
    sidecar's (its evidence), nor of the `secrets` container's (the mounted Secrets)."""
    from shipyard.plan.compose import SIDECAR_CAPABILITIES
    from shipyard.render.pod import MAIN_CAPABILITIES, SECRETS_CAPABILITIES
    from shipyard.taskformat.compose import ALLOWED_CAPABILITIES

    main, sidecar, secrets = (set(MAIN_CAPABILITIES), set(SIDECAR_CAPABILITIES),
                              set(SECRETS_CAPABILITIES))
    assert main - sidecar and sidecar - main, (main, sidecar)
    assert secrets - main and secrets - sidecar, secrets
    assert main - ALLOWED_CAPABILITIES, "a sidecar's cap_add could reach all of main's"
    assert "SYS_CHROOT" in main  # sshd's privilege separation, as in Harbor's containers
