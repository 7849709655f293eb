"""Certificates for the local cluster, made with the openssl command line."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import webstandins
from layout import FIRST_SERVICE_IP

SERVER_NAMES = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]
# 10.88.0.1: the pod bridge gateway, which the apiserver advertises (kubeproxy.py).
SERVER_IPS = ["127.0.0.1", FIRST_SERVICE_IP, "10.88.0.1"]


@dataclass(frozen=True)
class Cert:
    name: str
    subject: str
    server: bool = False
    client: bool = True


CERTS = [
    Cert("apiserver", "/CN=kube-apiserver", server=True, client=False),
    Cert("kubelet-serving", "/CN=localhost", server=True, client=False),
    Cert("admin", "/O=system:masters/CN=shipyard-admin"),
    # The apiserver talks to kubelets for exec/logs; system:masters keeps RBAC out of the way.
    Cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client"),
    Cert("kubelet", "/O=system:nodes/CN=system:node:localhost"),
    Cert("controller-manager", "/CN=system:kube-controller-manager"),
    Cert("scheduler", "/CN=system:kube-scheduler"),
    Cert("kube-proxy", "/CN=system:kube-proxy"),
]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def ensure_pki(pki: Path) -> None:
    """Create the CA, service-account keys and every certificate that is missing."""
    _ensure_ca(pki, "/CN=shipyard-localcluster-ca")
    if not (pki / "sa.key").exists():
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for cert in CERTS:
        if not (pki / f"{cert.name}.crt").exists() or _lacks_server_names(pki, cert):
            _issue(pki, cert)
    ensure_web_stand_in_pki(pki, list(webstandins.HOSTS), [webstandins.ADDRESS])


def _ensure_ca(d: Path, subject: str) -> None:
    """A CA of its own in `d` (ca.key, ca.crt), unless there is one."""
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "ca.crt").exists():
        _openssl("genrsa", "-out", "ca.key", "2048", cwd=d)
        _openssl(
            "req", "-x509", "-new", "-nodes", "-key", "ca.key", "-sha256", "-days", "3650",
            "-subj", subject, "-out", "ca.crt", cwd=d,
        )


# buildkitd's mTLS: a CA of its own, so that no cluster certificate (admin, kubelet, ...) is a
# build client; the client certificate goes only into build Jobs (operator setting
# SHIPYARD_BUILDKIT_TLS_DIR -> a Secret per ImageBuild).
BUILDKIT_SERVER_NAMES = ["localhost", "buildkitd"]
BUILDKIT_CERTS = [
    Cert("server", "/CN=buildkitd", server=True, client=False),
    Cert("client", "/CN=shipyard-build-job"),
]


def buildkit_pki(pki: Path) -> Path:
    return pki / "buildkit"


def ensure_buildkit_pki(pki: Path) -> Path:
    """buildkitd's CA, serving certificate and the build Jobs' client certificate; the dir."""
    d = buildkit_pki(pki)
    _ensure_ca(d, "/CN=shipyard-localcluster-buildkit-ca")
    for cert in BUILDKIT_CERTS:
        if not (d / f"{cert.name}.crt").exists():
            _issue(d, cert, BUILDKIT_SERVER_NAMES, ["127.0.0.1"])
    # The names a Kubernetes TLS Secret uses, for SHIPYARD_BUILDKIT_TLS_DIR.
    client = d / "client-secret"
    client.mkdir(exist_ok=True)
    for src, dst in (("ca.crt", "ca.crt"), ("client.crt", "tls.crt"), ("client.key", "tls.key")):
        (client / dst).write_bytes((d / src).read_bytes())
        (client / dst).chmod(0o600)
    return d


def web_stand_in_pki(pki: Path) -> Path:
    return pki / "web-stand-ins"


WEB_STAND_IN_CERT = Cert("server", "/CN=shipyard-web-stand-ins", server=True, client=False)


def ensure_web_stand_in_pki(pki: Path, names: list[str], ips: list[str]) -> Path:
    """A CA of its own for the web stand-ins (webstandins.py), trusted by the base image
    stand-ins only, and its serving certificate for `names`; the dir."""
    d = web_stand_in_pki(pki)
    _ensure_ca(d, "/CN=shipyard-localcluster-web-stand-ins-ca")
    wanted = ",".join([*names, *ips])
    issued = d / "names"
    if not (d / "server.crt").exists() or not issued.exists() or issued.read_text() != wanted:
        _issue(d, WEB_STAND_IN_CERT, names, ips)
        issued.write_text(wanted)
    return d


def _lacks_server_names(pki: Path, cert: Cert) -> bool:
    """A serving certificate issued before a name or IP was added to SERVER_NAMES/SERVER_IPS."""
    if not cert.server:
        return False
    result = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", f"{cert.name}.crt"],
        cwd=pki, capture_output=True, text=True,
    )
    text = result.stdout.split("Subject Alternative Name:")[-1].replace("IP Address:", "IP:")
    have = {entry.strip() for entry in text.replace("\n", ",").split(",") if entry.strip()}
    wanted = {f"DNS:{n}" for n in SERVER_NAMES} | {f"IP:{ip}" for ip in SERVER_IPS}
    return not wanted <= have


def _issue(pki: Path, cert: Cert, names: list[str] = SERVER_NAMES,
           ips: list[str] = SERVER_IPS) -> None:
    usages = []
    if cert.server:
        usages.append("serverAuth")
    if cert.client:
        usages.append("clientAuth")
    ext = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={','.join(usages)}",
    ]
    if cert.server:
        alt = [f"DNS:{n}" for n in names] + [f"IP:{ip}" for ip in ips]
        ext.append("subjectAltName=" + ",".join(alt))
    (pki / f"{cert.name}.ext").write_text("\n".join(ext) + "\n")
    _openssl("genrsa", "-out", f"{cert.name}.key", "2048", cwd=pki)
    _openssl(
        "req", "-new", "-key", f"{cert.name}.key", "-subj", cert.subject,
        "-out", f"{cert.name}.csr", cwd=pki,
    )
    _openssl(
        "x509", "-req", "-in", f"{cert.name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", f"{cert.name}.ext",
        "-out", f"{cert.name}.crt", cwd=pki,
    )


def kubeconfig(pki: Path, user: str, server: str) -> str:
    """A kubeconfig that embeds file paths to the CA and the user's client certificate."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: shipyard-local
  cluster:
    certificate-authority: {pki / 'ca.crt'}
    server: {server}
users:
- name: {user}
  user:
    client-certificate: {pki / f'{user}.crt'}
    client-key: {pki / f'{user}.key'}
contexts:
- name: shipyard-local
  context:
    cluster: shipyard-local
    user: {user}
current-context: shipyard-local
"""
