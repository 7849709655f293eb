"""The build objects (render.build_job)."""

from __future__ import annotations

import base64
import gzip
import io
import tarfile

from shipyard.plan.images import ImageNeed, ImageSettings
from shipyard.render.build_job import (
    build_context_configmap,
    build_image_build,
    build_job,
)

TASK = {"metadata": {"name": "hello", "namespace": "ns", "uid": "task-uid"}}
NEED = ImageNeed("environment", "environment/", "reg:5000/p/hello:abc123", "abc123" * 6, True,
                 42.5)
LOCAL = ImageSettings(backend="buildkit", registry="reg:5000/p", insecure_registry=True,
                      buildkit_addr="tcp://127.0.0.1:1234", builder_image="b:1",
                      host_network=True)


def _image_build(force: bool = False):
    ib = build_image_build(TASK, NEED, force)
    ib["metadata"]["uid"] = "ib-uid"
    return ib


def test_image_build_is_named_from_the_hash_and_owned_by_the_task_not_controlled():
    ib = _image_build()
    assert ib["metadata"]["name"] == NEED.build_name
    (owner,) = ib["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Task", "task-uid", False)
    assert ib["spec"]["ref"] == NEED.ref and ib["spec"]["timeoutSec"] == 42.5
    assert ib["spec"]["cacheRef"] == "reg:5000/p/hello:buildcache"


def test_context_configmap_holds_the_context_as_tar_gz():
    cm = build_context_configmap(_image_build(), {"Dockerfile": b"FROM x\n", "run.sh": b"ls"})
    data = gzip.decompress(base64.b64decode(cm["binaryData"]["context.tar.gz"]))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m.mode for m in tar.getmembers()}
    assert members == {"Dockerfile": 0o644, "run.sh": 0o755}
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "ImageBuild"


def test_job_runs_buildctl_with_push_cache_and_deadline():
    job = build_job(_image_build(), LOCAL)
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 43
    pod = spec["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    (main,) = pod["containers"]
    argv = main["command"]
    assert argv[:4] == ["buildctl", "--addr", "tcp://127.0.0.1:1234", "build"]
    assert "type=image,name=reg:5000/p/hello:abc123,push=true,registry.insecure=true" in argv
    assert ("type=registry,ref=reg:5000/p/hello:buildcache,mode=max,registry.insecure=true"
            in argv)
    assert main["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "tar -xzf" in pod["initContainers"][0]["command"][-1]
    assert not main["env"]  # no push credentials configured: none mounted


def test_push_credentials_are_mounted_only_into_the_build_job():
    settings = ImageSettings(backend="buildkit", registry="r/p", push_secret="push",
                             service_account="builder", node_selector={"pool": "b"})
    pod = build_job(_image_build(), settings)["spec"]["template"]["spec"]
    assert {"name": "DOCKER_CONFIG", "value": "/docker-config"} in pod["containers"][0]["env"]
    assert any(v.get("secret", {}).get("secretName") == "push" for v in pod["volumes"])
    assert pod["serviceAccountName"] == "builder" and pod["nodeSelector"] == {"pool": "b"}
    assert "hostNetwork" not in pod
    assert all("registry.insecure" not in a for a in pod["containers"][0]["command"])
