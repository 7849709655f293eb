"""The build objects (render.build_job)."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import io
import os
import tarfile

from shipyard.plan.images import ImageNeed, ImageSettings
from shipyard.render.build_job import (
    build_context_configmaps,
    build_image_build,
    build_job,
    context_parts,
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
    parts = context_parts({"Dockerfile": b"FROM x\n", "run.sh": b"ls"})
    (cm,) = build_context_configmaps(_image_build(), parts)
    assert cm["metadata"]["name"] == f"{NEED.build_name}-context"
    data = gzip.decompress(base64.b64decode(cm["binaryData"]["context.tar.gz"]))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m.mode for m in tar.getmembers()}
    assert members == {"Dockerfile": 0o644, "run.sh": 0o755}
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "ImageBuild"


def test_a_large_context_is_split_and_joined_in_order():
    big = {"Dockerfile": b"FROM x\n", "big.bin": os.urandom(2_000_000)}
    parts = context_parts(big)
    assert len(parts) == 3
    ib = build_image_build(TASK, NEED, False, len(parts))
    ib["metadata"]["uid"] = "ib-uid"
    cms = build_context_configmaps(ib, parts)
    assert [c["metadata"]["name"] for c in cms] == [
        f"{NEED.build_name}-context-{i}" for i in range(3)]
    joined = b"".join(base64.b64decode(c["binaryData"]["context.tar.gz"]) for c in cms)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(joined))) as tar:
        assert tar.extractfile("big.bin").read() == big["big.bin"]
    assert all(len(base64.b64decode(c["binaryData"]["context.tar.gz"])) <= 768 * 1024
               for c in cms)
    pod = build_job(ib, LOCAL)["spec"]["template"]["spec"]
    init = pod["initContainers"][0]
    assert init["command"][-1] == ("cat /context/0/context.tar.gz /context/1/context.tar.gz "
                                   "/context/2/context.tar.gz | tar -xzmf - -C /ctx")
    assert [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v] == [
        c["metadata"]["name"] for c in cms]


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
    assert pod["initContainers"][0]["command"][-1] == (
        "cat /context/0/context.tar.gz | tar -xzmf - -C /ctx")
    assert not main["env"]  # no push credentials configured: none mounted


def test_extra_hosts_reach_buildctl_as_the_dockerfile_frontends_add_hosts():
    assert not any(a.startswith("add-hosts=") for a in build_job(_image_build(), LOCAL)[
        "spec"]["template"]["spec"]["containers"][0]["command"])
    settings = dataclasses.replace(LOCAL, add_hosts=(("astral.sh", "198.18.0.1"),
                                                     ("m.internal", "10.0.0.5")))
    argv = build_job(_image_build(), settings)["spec"]["template"]["spec"]["containers"][0][
        "command"]
    i = argv.index("add-hosts=astral.sh=198.18.0.1,m.internal=10.0.0.5")
    assert argv[i - 1] == "--opt"


def test_push_credentials_are_mounted_only_into_the_build_job():
    settings = ImageSettings(backend="buildkit", registry="r/p", push_secret="push",
                             service_account="builder", node_selector={"pool": "b"})
    pod = build_job(_image_build(), settings)["spec"]["template"]["spec"]
    assert {"name": "DOCKER_CONFIG", "value": "/docker-config"} in pod["containers"][0]["env"]
    assert any(v.get("secret", {}).get("secretName") == "push" for v in pod["volumes"])
    assert pod["serviceAccountName"] == "builder" and pod["nodeSelector"] == {"pool": "b"}
    assert "hostNetwork" not in pod
    assert all("registry.insecure" not in a for a in pod["containers"][0]["command"])


def test_with_mtls_only_the_buildctl_container_mounts_a_client_secret_of_its_own():
    from dataclasses import replace

    from shipyard.render.build_job import build_tls_secret, tls_secret_name

    settings = replace(LOCAL, buildkit_tls_dir="/certs", buildkit_tls_server_name="buildkitd")
    ib = _image_build()
    job = build_job(ib, settings)
    spec = job["spec"]["template"]["spec"]
    (main,) = spec["containers"]
    argv = main["command"]
    assert argv[:12] == ["buildctl", "--addr", "tcp://127.0.0.1:1234",
                         "--tlscacert", "/buildkit-tls/ca.crt", "--tlscert",
                         "/buildkit-tls/tls.crt", "--tlskey", "/buildkit-tls/tls.key",
                         "--tlsservername", "buildkitd", "build"]
    secret_volumes = [v for v in spec["volumes"] if "secret" in v]
    assert [v["secret"]["secretName"] for v in secret_volumes] == [
        tls_secret_name(ib["metadata"]["name"])]
    assert any(m["mountPath"] == "/buildkit-tls" for m in main["volumeMounts"])
    (init,) = spec["initContainers"]  # it unpacks the task's bytes: no certificate there
    assert all(m["name"] != "buildkit-tls" for m in init["volumeMounts"])
    secret = build_tls_secret(ib, {"ca.crt": b"CA", "tls.crt": b"CRT", "tls.key": b"KEY"})
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "ImageBuild"
    assert base64.b64decode(secret["data"]["tls.key"]) == b"KEY"
    assert "--tls" not in " ".join(build_job(ib, LOCAL)["spec"]["template"]["spec"]
                                   ["containers"][0]["command"])


def test_on_the_pod_network_the_job_waits_for_buildkitd_to_let_it_in():
    settings = ImageSettings(backend="buildkit", registry="r/p",
                             buildkit_addr="tcp://shipyard-buildkitd.ops.svc:1234")
    spec = build_job(_image_build(), settings)["spec"]["template"]["spec"]
    context, wait = spec["initContainers"]
    assert context["name"] == "context" and wait["name"] == "wait-buildkitd"
    script = wait["command"][-1]
    assert "nc -w 2 shipyard-buildkitd.ops.svc 1234" in script and "exit 0" in script
    assert "volumeMounts" not in wait  # no certificate, no context: a TCP connect only
    assert spec["containers"][0]["command"][0] == "buildctl"
    # On the host network (the local cluster) or a unix socket: nothing to wait for.
    assert len(build_job(_image_build(), LOCAL)["spec"]["template"]["spec"]
               ["initContainers"]) == 1
