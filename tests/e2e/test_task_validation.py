"""A Task is validated once per content, not again at every operator start (issue 22, class 5):
its status keeps what the verdict was reached on (`status.validated`), and a starting operator
that finds it unchanged does not load the bundle again, the 512 MiB gzip bomb included."""

from __future__ import annotations

import base64
import gzip
import io
import tarfile
import time

from shipyard.api.task_source import BUNDLE_KEY, build_bundle, split_bundle
from tests.e2e.conftest import GROUP, TASK_IMAGE, VERSION, condition
from tests.e2e.test_trust import _rss_kib

FILES = {
    "task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                  f'timeout_sec = 60\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'),
    "instruction.md": "Nothing.\n",
    "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
}


def bomb() -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        info = tarfile.TarInfo("environment/big.bin")
        info.size = 512 << 20
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        chunk = b"\0" * (1 << 20)
        for _ in range(512):
            gz.write(chunk)
    return buf.getvalue()


def bundle_task(shipyard, name: str, bundle: bytes) -> None:
    parts = split_bundle(bundle)
    for i, part in enumerate(parts):
        shipyard.core.create_namespaced_config_map(shipyard.namespace, {
            "metadata": {"name": f"{name}-files-{i}"},
            "binaryData": {BUNDLE_KEY: base64.b64encode(part).decode()}})
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "tasks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
        "spec": {"source": {"configMap": {"name": f"{name}-files", "parts": len(parts)}}}})


def test_a_starting_operator_does_not_validate_an_unchanged_task_again(shipyard, operator):
    bundle_task(shipyard, "plain", build_bundle({k: v.encode() for k, v in FILES.items()}))
    bundle_task(shipyard, "bomb", bomb())
    plain, bombed = shipyard.wait_task("plain"), shipyard.wait_task("bomb")
    assert condition(plain, "Ready")["status"] == "True", plain["status"]
    refused = condition(bombed, "Ready")
    assert (refused["status"], refused["reason"]) == ("False", "TaskInvalid"), refused
    for task in (plain, bombed):
        assert task["status"]["validated"].startswith("sha256:"), task["status"]
    # The bundles go: an operator that loaded them again would say BundleNotFound.
    for name in ("plain", "bomb"):
        for cm in shipyard.core.list_namespaced_config_map(shipyard.namespace).items:
            if cm.metadata.name.startswith(f"{name}-files-"):
                shipyard.core.delete_namespaced_config_map(cm.metadata.name, shipyard.namespace)
    operator.stop()
    operator.start()
    assert operator.proc is not None
    started = _rss_kib(operator.proc.pid)
    # A Task created meanwhile is validated (the operator is at work), ...
    shipyard.task("fresh", FILES)
    assert condition(shipyard.wait_task("fresh"), "Ready")["status"] == "True"
    time.sleep(5)
    # ... the two others keep their verdicts: not loaded again, the bomb not opened again.
    again = shipyard.get("tasks", "plain"), shipyard.get("tasks", "bomb")
    assert condition(again[0], "Ready") == condition(plain, "Ready"), again[0]["status"]
    assert condition(again[1], "Ready") == refused, again[1]["status"]
    assert _rss_kib(operator.proc.pid) - started < 100 * 1024
    # A change of the spec is validated: now the missing bundle is seen.
    shipyard.api.patch_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "tasks",
                                                "plain", {"spec": {"forceBuild": True}})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready = condition(shipyard.get("tasks", "plain"), "Ready")
        if ready["reason"] == "BundleNotFound":
            break
        time.sleep(0.5)
    assert ready["reason"] == "BundleNotFound", ready
