"""The local cluster's DNS, registry mirrors and stand-ins (hack/localcluster; issue 23)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))

import clusterdns  # noqa: E402
import components  # noqa: E402
import cpython  # noqa: E402
import imagebuilds  # noqa: E402
import mirrors  # noqa: E402


def test_mirrors_preserve_paths_for_containerd_as_for_builds():
    hub = tomllib.loads(mirrors.hosts_toml("docker.io", imagebuilds.MIRRORS["docker.io"]))
    assert hub["server"] == "https://registry-1.docker.io"
    assert list(hub["host"]) == ["http://127.0.0.1:5055/v2"]
    assert "override_path" not in hub["host"]["http://127.0.0.1:5055/v2"]
    ghcr = tomllib.loads(mirrors.hosts_toml("ghcr.io", imagebuilds.MIRRORS["ghcr.io"]))
    host = ghcr["host"]["http://127.0.0.1:5055/v2/ghcr.io"]
    assert host["override_path"] is True and host["capabilities"] == ["pull", "resolve"]
    assert ghcr["server"] == "https://ghcr.io"


def test_the_cluster_dns_is_kube_dns_pods_behind_its_service():
    objs = {o["kind"]: o for o in clusterdns.manifests()}
    service, deployment = objs["Service"], objs["Deployment"]
    assert service["metadata"]["name"] == "kube-dns"
    assert service["spec"]["clusterIP"] == clusterdns.DNS_SERVICE_IP
    # The operator's NetworkPolicies allow DNS to exactly these pods.
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"] == {"k8s-app": "kube-dns"}
    assert deployment["metadata"]["namespace"] == "kube-system"
    assert pod["spec"]["dnsPolicy"] == "Default"  # forwards to the host's resolver
    assert "forward . /etc/resolv.conf" in objs["ConfigMap"]["data"]["Corefile"]
    assert f"clusterDNS: [{clusterdns.DNS_SERVICE_IP}]" in clusterdns.kubelet_settings()


def test_a_kubelet_without_the_cluster_dns_is_told_apart():
    assert not clusterdns.kubelet_has_cluster_dns({"kubeletconfig": {"clusterDNS": []}})
    assert not clusterdns.kubelet_has_cluster_dns({"kubeletconfig": {"clusterDNS": None}})
    assert not clusterdns.kubelet_has_cluster_dns({"kubeletconfig": {}})
    assert clusterdns.kubelet_has_cluster_dns(
        {"kubeletconfig": {"clusterDNS": [clusterdns.DNS_SERVICE_IP]}})


def test_a_kubelet_without_the_pod_pids_limit_is_restarted_once_by_up():
    dns = {"clusterDNS": [clusterdns.DNS_SERVICE_IP]}
    limit = components.POD_PIDS_LIMIT
    assert components.kubelet_lacks({"kubeletconfig": {**dns, "podPidsLimit": limit}}) == []
    assert components.kubelet_lacks({"kubeletconfig": {**dns, "podPidsLimit": -1}}) == [
        f"podPidsLimit {limit}"]
    assert components.kubelet_lacks({"kubeletconfig": {"podPidsLimit": -1}}) == [
        "the cluster DNS", f"podPidsLimit {limit}"]
    # the configuration a cold `up` writes carries it
    assert f"podPidsLimit: {limit}\n" in components._kubelet_config(components.Layout.default())


def test_every_stand_in_is_labelled_and_the_common_bases_have_one():
    tags = set()
    for name, (dockerfile, names) in imagebuilds.STAND_INS.items():
        assert f'LABEL {imagebuilds.STAND_IN_LABEL}="' in dockerfile, name
        assert "stand-in" in dockerfile.split(imagebuilds.STAND_IN_LABEL, 1)[1], name
        tags.update(names)
    for base in ("library/ubuntu:24.04", "library/ubuntu:22.04", "library/golang:1.25-bookworm",
                 "library/node:20", "library/alpine:3.22", "library/python:3.12-slim",
                 "ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest",
                 "ghcr.io/astral-sh/uv:latest"):
        assert base in tags, base


def test_each_python_tag_has_one_stand_in_and_a_pyenv_build_is_that_minors(tmp_path,
                                                                          monkeypatch):
    owners: dict[str, list[str]] = {}
    for name, (_, names) in imagebuilds.STAND_INS.items():
        for tag in names:
            owners.setdefault(tag, []).append(name)
    for minor in cpython.PYTHON_MINORS:
        for tag in imagebuilds._python_tags(minor):
            assert len(owners.get(tag, [])) == 1, (tag, owners.get(tag))
    versions = tmp_path / "versions"
    for build in ("3.13.0", "3.13.11", "3.13.2", "3.13.0t", "3.12.4"):
        (versions / build / "bin").mkdir(parents=True)
        (versions / build / "bin" / f"python{build[:4]}").write_text("")
    monkeypatch.setattr(cpython, "PYENV_VERSIONS", versions)
    assert cpython.pyenv_cpython("3.13") == versions / "3.13.11"  # not the free-threaded
    assert cpython.pyenv_cpython("3.12") == versions / "3.12.4"
    assert cpython.pyenv_cpython("3.11") is None


def test_a_pyenv_build_is_copied_to_usr_local_with_its_prefix_rewritten(tmp_path):
    build = tmp_path / "versions" / "3.13.0"
    prefix = str(build)
    files = {
        "bin/pip3": f"#!{prefix}/bin/python3.13\nimport pip\n",
        "lib/python3.13/_sysconfigdata__linux_x86_64-linux-gnu.py":
            f"build_time_vars = {{'INCLUDEPY': '{prefix}/include/python3.13'}}\n",
        "lib/python3.13/os.py": "# the stdlib\n",
        "lib/python3.13/test/test_os.py": "# a test\n",
        "lib/python3.13/__pycache__/os.cpython-313.pyc": "bytecode",
        "lib/python3.13/config-3.13-x86_64-linux-gnu/libpython3.13.a": "static",
        "lib/python3.13/site-packages/pip/__init__.py": "# pip\n",
        "lib/python3.13/site-packages/pip-24.2.dist-info/RECORD": "pip/__init__.py,sha256=x,5\n",
        "lib/python3.13/site-packages/setuptools-65.5.0.dist-info/RECORD":
            "distutils-precedence.pth,sha256=y,151\n",
        "lib/python3.13/site-packages/distutils-precedence.pth": "import _distutils_hack\n",
        "lib/python3.13/site-packages/_machine_hook.pth": "import os\n",
        "lib/python3.13/site-packages/boto3/__init__.py": "# installed on the machine since\n",
        "lib/python3.13/site-packages/boto3-1.0.dist-info/RECORD": "boto3/__init__.py,,\n",
    }
    for rel, text in files.items():
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        (build / rel).write_text(text)
    (build / "bin" / "pip3").chmod(0o755)
    binary = b"\x7fELF\x00\x00" + prefix.encode() + b"/lib\x00"
    (build / "lib" / "libpython3.13.so.1.0").write_bytes(binary)
    (build / "bin" / "python3").symlink_to("python3.13")
    dest = tmp_path / "ctx" / "cpython-3.13"
    cpython.copy_cpython(build, dest)
    copied = {str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir()}
    assert copied == {"bin/pip3", "bin/python3", "lib/libpython3.13.so.1.0",
                      "lib/python3.13/_sysconfigdata__linux_x86_64-linux-gnu.py",
                      "lib/python3.13/os.py", "lib/python3.13/site-packages/pip/__init__.py",
                      "lib/python3.13/site-packages/pip-24.2.dist-info/RECORD",
                      "lib/python3.13/site-packages/setuptools-65.5.0.dist-info/RECORD",
                      "lib/python3.13/site-packages/distutils-precedence.pth"}
    assert (dest / "bin" / "pip3").read_text().startswith("#!/usr/local/bin/python3.13\n")
    assert (dest / "bin" / "pip3").stat().st_mode & 0o777 == 0o755
    assert "'/usr/local/include/python3.13'" in (
        dest / "lib/python3.13/_sysconfigdata__linux_x86_64-linux-gnu.py").read_text()
    assert (dest / "lib" / "libpython3.13.so.1.0").read_bytes() == binary  # binaries as they are
    assert (dest / "bin" / "python3").readlink() == Path("python3.13")
