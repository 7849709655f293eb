"""A Dockerfile is the task author's code: its `RUN` steps must not reach the cluster (issue 22,
class 4). On the local cluster buildkitd runs them on a build network of their own
(hack/localcluster/buildnet.py) and takes only clients holding the build Jobs' certificate.

Each attack is a Task whose Dockerfile tries, as root and as an unprivileged user, every address
the cluster answers on: etcd, the apiserver on each of the node's addresses and its Service IP,
the kubelet, the registry (whose pushes would overwrite other tasks' images), buildkitd itself,
another pod and Service, the metadata address. The same build must still reach PyPI and the
Debian archive.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import ssl
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from tests.conftest import buildkit_client
from tests.e2e.test_image_builds import build_jobs, condition_any, wait_images

pytestmark = pytest.mark.usefixtures("local_only")

LOCALCLUSTER = Path("/var/lib/shipyard-localcluster")
BUILDCTL = Path.home() / ".cache" / "shipyard" / "buildkit-v0.34.2" / "buildctl"

PROBE = r'''
import socket, sys, threading
results = {}
def probe(target):
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(4)
    try:
        s.connect((host, int(port)))
        results[target] = "REACHED"
    except OSError as e:
        results[target] = "BLOCKED"
    finally:
        s.close()
threads = [threading.Thread(target=probe, args=(t,)) for t in sys.argv[2:]]
[t.start() for t in threads]
[t.join() for t in threads]
for t in sys.argv[2:]:
    print(sys.argv[1], results[t], t, flush=True)
sys.exit(1 if "REACHED" in results.values() else 0)
'''


@pytest.fixture(scope="module")
def local_only(cluster) -> None:
    if not cluster.local:
        pytest.skip("the local cluster's build network and buildkitd (hack/localcluster)")


@pytest.fixture
def batch_v1(api_client):
    from kubernetes import client

    return client.BatchV1Api(api_client)


WEB_STAND_IN = "198.18.0.1"
"""The local cluster's stand-in for astral.sh (hack/localcluster/webstandins.py): on the host's
loopback, answering on 443 only (test_real_tasks.py checks that from a pod)."""


def host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True,
                         check=True).stdout
    return [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])
            if not a["local"].startswith("127.") and a["local"] != WEB_STAND_IN]


def cluster_targets(core_v1) -> list[str]:
    """Every cluster address a build must not reach, each answering from the host."""
    hosts = host_addresses()
    targets = [f"{h}:{p}" for h in hosts for p in (2379, 6443, 10250, 5055, 1234)]
    targets += ["127.0.0.1:2379", "127.0.0.1:6443", "127.0.0.1:5055", "169.254.169.254:80"]
    kubernetes = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    dns = core_v1.read_namespaced_service("kube-dns", "kube-system").spec.cluster_ip
    targets += [f"{kubernetes}:443", f"{dns}:53"]
    pods = core_v1.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-dns").items
    targets += [f"{p.status.pod_ip}:53" for p in pods if p.status.pod_ip]
    return targets


def reachable_from_host(target: str) -> bool:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    except OSError:
        return False


def probe_task(nonce: str, targets: list[str], extra: str = "") -> dict[str, str]:
    args = " ".join(targets)
    dockerfile = (
        "FROM python:3.12-slim\n"
        "COPY probe.py /probe.py\n"
        f"RUN echo {nonce} && python3 /probe.py root {args}\n"
        f"RUN useradd -m builder\nUSER builder\n"
        f"RUN echo {nonce} && python3 /probe.py non-root {args}\n"
        "USER root\n"
        # What a build is for still works: PyPI and the Debian archive.
        f"RUN echo {nonce} && pip install --no-cache-dir -q six "
        "&& python3 -c 'import six; print(\"pypi-ok\")'\n"
        "RUN apt-get update -qq && echo debian-archive-ok\n" + extra)
    return build_task(dockerfile)


def build_task(dockerfile: str) -> dict[str, str]:
    """A trivial task whose image build runs the probe (`environment/probe.py`)."""
    return {
        "task.toml": 'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                     'timeout_sec = 60\n[environment]\nbuild_timeout_sec = 300\n',
        "instruction.md": "Nothing.\n",
        "environment/Dockerfile": dockerfile,
        "environment/probe.py": PROBE,
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": "#!/bin/bash\ntrue\n",
    }


def build_log(shipyard, batch_v1, namespace: str) -> str:
    (job,) = build_jobs(batch_v1, namespace)
    (pod,) = shipyard.core.list_namespaced_pod(
        namespace, label_selector=f"job-name={job.metadata.name}").items
    return shipyard.core.read_namespaced_pod_log(pod.metadata.name, namespace,
                                                 container="buildctl")


def test_run_steps_reach_package_archives_but_nothing_of_the_cluster(
        shipyard, batch_v1, core_v1, namespace):
    targets = cluster_targets(core_v1)
    # Not trivially unreachable: from the host, the apiserver answers on each node address,
    # CoreDNS on its pod IP, the registry and etcd on loopback.
    answering = [t for t in targets if reachable_from_host(t)]
    assert {f"{h}:6443" for h in host_addresses()} <= set(answering), answering
    assert "127.0.0.1:2379" in answering and "127.0.0.1:5055" in answering, answering
    nonce = uuid.uuid4().hex
    shipyard.task("probe", probe_task(nonce, targets))
    task = wait_images(shipyard, "probe", timeout=300)
    log = build_log(shipyard, batch_v1, namespace)
    cond = condition_any(task, "ImagesReady")
    assert cond["status"] == "True", (cond, log[-3000:])
    for who in ("root", "non-root"):
        for target in targets:
            assert f"{who} BLOCKED {target}" in log, (who, target, log[-3000:])
    assert "REACHED" not in log
    assert "pypi-ok" in log and "debian-archive-ok" in log


@pytest.mark.parametrize(("flag", "entitlement"), [
    ("--network=host", "network.host"),
    ("--security=insecure", "security.insecure"),
])
def test_a_run_step_cannot_ask_for_the_host_network_or_privileges(
        shipyard, batch_v1, namespace, flag, entitlement):
    nonce = uuid.uuid4().hex
    files = probe_task(nonce, ["127.0.0.1:2379"])
    files["environment/Dockerfile"] = (
        "FROM python:3.12-slim\nCOPY probe.py /probe.py\n"
        f"RUN {flag} echo {nonce} && python3 /probe.py host 127.0.0.1:2379 127.0.0.1:6443\n")
    name = "ent-" + entitlement.replace(".", "-")
    shipyard.task(name, files)
    task = wait_images(shipyard, name, timeout=180)
    cond = condition_any(task, "ImagesReady")
    assert cond["status"] == "False" and cond["reason"] == "ImageBuildFailed", cond
    log = build_log(shipyard, batch_v1, namespace)
    assert f"{entitlement} is not allowed" in log, log[-3000:]
    assert "REACHED" not in log


def tls_without_certificate_refused(ca: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection(("127.0.0.1", 1234), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            data = tls.recv(64)
    except (ssl.SSLError, OSError):
        return True
    return data == b""  # closed without a word


def _buildctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BUILDCTL), "--addr", "tcp://127.0.0.1:1234", *args,
                           "debug", "workers"], capture_output=True, text=True, timeout=30)


def test_buildkitd_takes_only_clients_with_the_build_jobs_certificate(
        shipyard, batch_v1, namespace):
    pki = LOCALCLUSTER / "pki"
    # No certificate, a plain gRPC client: refused.
    plain = _buildctl()
    assert plain.returncode != 0, plain.stdout
    # A certificate of the cluster's own CA (the admin's): refused too.
    admin = _buildctl("--tlscacert", str(pki / "buildkit" / "ca.crt"),
                      "--tlscert", str(pki / "admin.crt"), "--tlskey", str(pki / "admin.key"))
    assert admin.returncode != 0, admin.stdout
    # A raw TLS client without a certificate: the handshake is refused.
    assert tls_without_certificate_refused(pki / "buildkit" / "ca.crt")
    # The build Job's certificate: served.
    ok = subprocess.run([str(BUILDCTL), *buildkit_client(), "debug", "workers"],
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    # Only the build Job holds it: a Secret per ImageBuild, mounted by its Job alone.
    nonce = uuid.uuid4().hex
    shipyard.task("tls", probe_task(nonce, ["169.254.169.254:80"]))
    shipyard.trial("tls-oracle", "tls")
    assert condition_any(wait_images(shipyard, "tls", timeout=300),
                         "ImagesReady")["status"] == "True"
    (job,) = build_jobs(batch_v1, namespace)
    secret = shipyard.core.read_namespaced_secret(f"{job.metadata.name}-buildkit-tls", namespace)
    assert secret.metadata.owner_references[0].kind == "ImageBuild"
    trial = shipyard.wait("tls-oracle", timeout=180)
    assert trial["status"]["phase"] == "Completed", trial["status"]
    for pod in shipyard.core.list_namespaced_pod(namespace).items:
        mounts = [v.secret.secret_name for v in pod.spec.volumes or [] if v.secret]
        if pod.metadata.labels.get("job-name") == job.metadata.name:
            assert secret.metadata.name in mounts
        else:
            assert secret.metadata.name not in mounts, pod.metadata.name
    # The key is nowhere else: not in a ConfigMap, an Event, a status or the build's log,
    # neither as PEM nor base64.
    key = (LOCALCLUSTER / "pki" / "buildkit" / "client-secret" / "tls.key").read_text()
    body = "".join(key.splitlines()[1:-1])
    needles = [body[40:100], base64.b64encode(key.encode()).decode()[40:100]]
    seen = [json.dumps(cm.data or {}) + json.dumps(cm.binary_data or {})
            for cm in shipyard.core.list_namespaced_config_map(namespace).items]
    seen += [f"{e.message}" for e in shipyard.core.list_namespaced_event(namespace).items]
    seen += [json.dumps(shipyard.get(plural, name).get("status"))
             for plural, name in (("tasks", "tls"), ("trials", "tls-oracle"),
                                  ("imagebuilds", job.metadata.name))]
    seen.append(build_log(shipyard, batch_v1, namespace))
    assert not [text for text in seen for n in needles if n in text]


# ------------------------------------------------ ADD <url>: fetched by buildkitd itself


def add_task(nonce: str, dockerfile: str) -> dict[str, str]:
    files = probe_task(nonce, [])
    files["environment/Dockerfile"] = dockerfile
    files["environment/nonce.txt"] = nonce + "\n"
    return files


def add_attacks(core_v1) -> dict[str, tuple[str, str | None]]:
    """name -> (the URL an ADD fetches, the host:port that answers it from the host, if any).
    buildkitd fetches ADD sources itself, on the host's network, not in a build container."""
    node = next(h for h in host_addresses() if not h.startswith("10.89."))
    kubernetes = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    dns = core_v1.read_namespaced_service("kube-dns", "kube-system").spec.cluster_ip
    (coredns, *_) = [p.status.pod_ip for p in core_v1.list_namespaced_pod(
        "kube-system", label_selector="k8s-app=kube-dns").items if p.status.pod_ip]
    return {
        "etcd": ("http://127.0.0.1:2379/v3/kv/range", "127.0.0.1:2379"),
        "apiserver": (f"https://{node}:6443/api/v1/secrets", f"{node}:6443"),
        "apiserver-loopback": ("https://127.0.0.1:6443/version", "127.0.0.1:6443"),
        "apiserver-ipv6": ("https://[::1]:6443/version", None),
        "apiserver-service": (f"https://{kubernetes}/version", f"{kubernetes}:443"),
        "kubelet": ("https://127.0.0.1:10250/pods", "127.0.0.1:10250"),
        "metadata": ("http://169.254.169.254/latest/meta-data/iam/", None),
        "coredns-service": (f"http://{dns}:53/", f"{dns}:53"),
        "coredns-pod": (f"http://{coredns}:53/", f"{coredns}:53"),
        "buildkitd": ("https://127.0.0.1:1234/", "127.0.0.1:1234"),
        "registry-other-address": (f"http://{node}:5055/v2/", None),
    }


def manifest_digest(repo: str, tag: str) -> str | None:
    request = urllib.request.Request(
        f"http://127.0.0.1:5055/v2/{repo}/manifests/{tag}", method="HEAD",
        headers={"Accept": "application/vnd.oci.image.index.v1+json, "
                           "application/vnd.docker.distribution.manifest.list.v2+json, "
                           "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        return resp.headers.get("Docker-Content-Digest")


def test_add_url_cannot_fetch_from_the_cluster_the_host_or_the_metadata_server(
        shipyard, core_v1, namespace):
    attacks = add_attacks(core_v1)
    # Not trivially refused: these answer from the host, where buildkitd runs.
    for name, (_, answers) in attacks.items():
        if answers is not None:
            assert reachable_from_host(answers), (name, answers)
    victim = ("library/debian", "bookworm")
    before = manifest_digest(*victim)
    nonce = uuid.uuid4().hex
    for name, (url, _) in attacks.items():
        shipyard.task(f"add-{name}", add_task(
            nonce, f"FROM debian:bookworm\nCOPY nonce.txt /nonce.txt\nADD {url} /fetched\n"))
    # The registry's write API: ADD only GETs, so an upload URL is not an upload.
    shipyard.task("add-registry-write", add_task(
        nonce, "FROM debian:bookworm\nCOPY nonce.txt /nonce.txt\n"
        f"ADD http://127.0.0.1:5055/v2/{victim[0]}/blobs/uploads/ /fetched\n"))
    # What builds are for still works: a stand-in base from the registry, pip and apt in RUN
    # steps, an ADD from the outside world (PyPI), the push to the registry.
    shipyard.task("add-normal", add_task(
        nonce, "FROM python:3.12-slim\nCOPY nonce.txt /nonce.txt\n"
        "ADD https://pypi.org/simple/six/ /six.html\n"
        "RUN grep -q six- /six.html && echo add-from-pypi-ok\n"
        "RUN pip install --no-cache-dir -q six && python3 -c 'import six'\n"
        "RUN apt-get update -qq && echo debian-archive-ok\n"))
    for name, (url, _) in attacks.items():
        task = wait_images(shipyard, f"add-{name}", timeout=300)
        cond = condition_any(task, "ImagesReady")
        assert cond["status"] == "False" and cond["reason"] == "ImageBuildFailed", (name, cond)
        # Refused by the build network, at once, and said so: not a TLS or HTTP error of a
        # server it reached.
        assert url in cond["message"], (name, cond["message"])
        assert "no route to host" in cond["message"], (name, cond["message"])
        assert "refused by the build network" in cond["message"], (name, cond["message"])
    write = condition_any(wait_images(shipyard, "add-registry-write", timeout=300),
                          "ImagesReady")
    assert write["status"] == "False" and write["reason"] == "ImageBuildFailed", write
    assert manifest_digest(*victim) == before
    normal = condition_any(wait_images(shipyard, "add-normal", timeout=400), "ImagesReady")
    assert normal["status"] == "True", normal


# ------------------------------------------------ one build's RUN step against another's

LISTENER = r'''
import socket, sys, time
nonce, seconds, port = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.connect(("192.0.2.200", 9))  # routing only: the address of this container's eth0
ip4 = probe.getsockname()[0]
def link_local():
    """This container's IPv6 link-local address and interface, once DAD is done (not
    tentative, flag 0x40), as /proc/net/if_inet6 lists them."""
    for _ in range(50):
        for f in (line.split() for line in open("/proc/net/if_inet6")):
            if f[0].startswith("fe80") and not int(f[4], 16) & 0x40:
                return "fe80::" + ":".join(f[0][i:i + 4] for i in range(16, 32, 4)), f[5]
        time.sleep(0.2)
    raise SystemExit("no IPv6 link-local address")
ll, iface = link_local()
server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 and IPv6
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("::", port))
server.listen(16)
for target in ((ip4, port), (ll + "%" + iface, port)):  # it answers on both addresses
    with socket.create_connection(target, timeout=5) as c:
        c.sendall(b"self\n")
    print("SELF-OK", target[0], flush=True)
until = time.time() + seconds
print("LISTENING", ip4, ll, until, nonce, flush=True)
while time.time() < until:
    server.settimeout(max(0.1, until - time.time()))
    try:
        conn, peer = server.accept()
    except OSError:
        continue
    with conn:
        conn.settimeout(2)
        try:
            said = conn.recv(16)
        except OSError:
            said = b""
        if said != b"self\n":
            print("FOREIGN-CONNECTION from", peer[0], flush=True)
print("LISTENER-DONE", flush=True)
'''

ATTACKER = r'''
import socket, sys, time
nonce, ip4, ll, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
# This container's own interface (the same link-local network as the listener's).
iface = next(f[5] for f in (line.split() for line in open("/proc/net/if_inet6"))
             if f[0].startswith("fe80"))
def attempt(label, target):
    try:
        with socket.create_connection(target, timeout=5) as c:
            c.sendall(b"attack\n")
        print("REACHED", label, flush=True)
    except OSError as e:
        print("BLOCKED", label, type(e).__name__, flush=True)
print("PROBED-AT", time.time(), nonce, flush=True)
attempt("ipv4", (ip4, port))
attempt("ipv6-link-local", (ll + "%" + iface, port))
attempt("control-pypi", ("pypi.org", 443))  # the probe itself works: the outside is reached
'''


def build_pod_logs(shipyard, namespace: str) -> list[str]:
    logs = []
    for pod in shipyard.core.list_namespaced_pod(
            namespace, label_selector="shipyard.dev/image-build").items:
        try:
            logs.append(shipyard.core.read_namespaced_pod_log(
                pod.metadata.name, namespace, container="buildctl"))
        except ApiException:  # not started yet
            continue
    return logs


def test_a_build_cannot_connect_to_a_concurrent_builds_run_step(shipyard, namespace):
    nonce, port = uuid.uuid4().hex, 7777
    listener = probe_task(nonce, [])
    listener["environment/listen.py"] = LISTENER
    listener["environment/Dockerfile"] = (
        "FROM python:3.12-slim\nCOPY listen.py /listen.py\n"
        f"RUN python3 /listen.py {nonce} 120 {port}\n")
    shipyard.task("listener", listener)
    deadline, found = time.monotonic() + 240, None
    while found is None and time.monotonic() < deadline:
        for log in build_pod_logs(shipyard, namespace):
            match = re.search(rf"LISTENING (\S+) (\S+) (\S+) {nonce}", log)
            if match:
                found = match.groups()
        time.sleep(1)
    assert found, "the listener's RUN step did not start listening"
    ip4, ll, until = found
    assert ip4.startswith("10.89.") and ll.startswith("fe80::"), found
    attacker = probe_task(nonce, [])
    attacker["environment/attack.py"] = ATTACKER
    attacker["environment/Dockerfile"] = (
        "FROM python:3.12-slim\nCOPY attack.py /attack.py\n"
        f"RUN python3 /attack.py {nonce} {ip4} {ll} {port}\n")
    shipyard.task("attacker", attacker)
    attack = condition_any(wait_images(shipyard, "attacker", timeout=300), "ImagesReady")
    assert attack["status"] == "True", attack
    (log,) = [text for text in build_pod_logs(shipyard, namespace) if "PROBED-AT" in text]
    probed = float(re.search(rf"PROBED-AT (\S+) {nonce}", log).group(1))
    assert probed < float(until), "the attacker probed after the listener had stopped"
    assert "BLOCKED ipv4" in log and "BLOCKED ipv6-link-local" in log, log[-3000:]
    assert "REACHED control-pypi" in log, log[-3000:]
    # The listener answered on both addresses from inside, saw no foreign connection, and its
    # build finished and was pushed like any other.
    listen = condition_any(wait_images(shipyard, "listener", timeout=300), "ImagesReady")
    assert listen["status"] == "True", listen
    (log,) = [text for text in build_pod_logs(shipyard, namespace) if "LISTENER-DONE" in text]
    assert log.count("SELF-OK") >= 2 and "FOREIGN-CONNECTION" not in log, log[-3000:]


def test_a_dockerfile_that_fork_bombs_holds_only_the_builds_pids(shipyard, namespace):
    """A RUN step that fork-bombs meets the build steps' PID limit
    (`buildnet.BUILD_PIDS_LIMIT`; dash says `Cannot fork`) instead of taking the node's: the
    step's own `timeout` ends it, the image is built and pushed, and a trial of it scores as
    usual with the node Ready. (`timeout` kills its whole process group in one signal, which
    no fork escapes. A step that instead ended when its shell's `wait` on a `sleep` of its own
    returned ran past 300 s once in CI; that shell is PID 1 of the step, the reaper of every
    orphaned bomber, among thousands of processes forking on 2 cores.)"""
    nonce = uuid.uuid4().hex
    shipyard.task("bomb-build", build_task(
        "FROM python:3.12-slim\n"
        f"RUN echo {nonce}; timeout -s KILL 15 sh -c 'b() {{ b | b & }}; b; sleep 120'; "
        f"echo BOMB-OVER {nonce}\n"))
    built = condition_any(wait_images(shipyard, "bomb-build", timeout=300), "ImagesReady")
    assert built["status"] == "True", built
    (log,) = [text for text in build_pod_logs(shipyard, namespace) if nonce in text]
    assert f"BOMB-OVER {nonce}" in log and "Cannot fork" in log, log[-3000:]
    shipyard.trial("bomb-build-oracle", "bomb-build")
    status = shipyard.wait("bomb-build-oracle", timeout=180)["status"]
    assert status["phase"] == "Completed" and status["rewards"] == {"reward": 1}, status
    node = shipyard.core.read_node("localhost")
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
