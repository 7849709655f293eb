"""The local cluster's stand-in for astral.sh (hack/localcluster/webstandins.py)."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))

import clusterdns  # noqa: E402
import webstandins  # noqa: E402
from layout import POD_CIDR, SERVICE_CIDR  # noqa: E402


def test_its_address_is_outside_the_clusters_ranges_and_answers_on_443_only():
    address = ipaddress.ip_address(webstandins.ADDRESS)
    assert address in ipaddress.ip_network("198.18.0.0/15")  # benchmarking, never routed
    assert all(address not in ipaddress.ip_network(c) for c in (POD_CIDR, SERVICE_CIDR))
    rules = webstandins.NFT_RULESET
    assert f"ip daddr {webstandins.ADDRESS} tcp dport 443 accept" in rules
    assert f"ip daddr {webstandins.ADDRESS} reject" in rules
    assert rules.index("tcp dport 443 accept") < rules.index("reject")
    assert rules.startswith(f"table inet {webstandins.NFT_TABLE}\ndelete table")  # idempotent


def test_pods_name_it_through_the_cluster_dns():
    assert f"{webstandins.ADDRESS} astral.sh" in clusterdns.COREFILE
    hosts = clusterdns.COREFILE.index("hosts {")
    assert "fallthrough" in clusterdns.COREFILE[hosts:clusterdns.COREFILE.index("forward")]


def test_the_installer_is_a_stand_in_that_says_so_and_nothing_else_is_served(tmp_path):
    status, body, _ = webstandins.answer("/uv/0.8.15/install.sh", tmp_path)
    script = body.decode()
    assert status == 200 and script.startswith("#!/bin/sh\n")
    assert "https://astral.sh/shipyard-stand-in/uv/0.8.15/$tool" in script
    assert "stand-in for astral.sh" in script and '$HOME/.local/bin' in script
    assert webstandins.answer("/uv/install.sh", tmp_path)[1] == webstandins.answer(
        f"/uv/{webstandins.UV_LATEST}/install.sh", tmp_path)[1]
    for path in ("/", "/uv/latest/install.sh", "/uv/0.9.7/../../etc/passwd",
                 "/shipyard-stand-in/uv/0.9.7/sh"):
        assert webstandins.answer(path, tmp_path)[0] == 404, path
    assert not list(tmp_path.iterdir())  # nothing fetched for a refused path


def test_the_installer_puts_uv_where_uvs_own_installer_would(tmp_path):
    """Run by dash with a `curl` that records what it fetched: the default folder with its
    `env` file, UV_INSTALL_DIR, and UV_UNMANAGED_INSTALL (no `env` file, as upstream)."""
    import os
    import subprocess

    script = tmp_path / "install.sh"
    script.write_bytes(webstandins.answer("/uv/0.9.7/install.sh", tmp_path / "cache")[1])
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text('#!/bin/sh\nfor a; do last=$a; done\necho "$2" > "$last"\n')
    (bin_dir / "curl").chmod(0o755)
    home = tmp_path / "home"
    cases = {(): home / ".local/bin", (("UV_INSTALL_DIR", str(tmp_path / "d")),): tmp_path / "d",
             (("UV_UNMANAGED_INSTALL", str(tmp_path / "u")),): tmp_path / "u"}
    for extra, dest in cases.items():
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), **dict(extra)}
        done = subprocess.run(["dash", str(script)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert (dest / "uv").read_text().strip() == (
            "https://astral.sh/shipyard-stand-in/uv/0.9.7/uv")
        assert os.access(dest / "uvx", os.X_OK)
        assert (dest / "env").exists() == ("UV_UNMANAGED_INSTALL" not in dict(extra)), dest


def test_a_fresh_pki_has_each_ca_and_a_serving_certificate_for_the_stand_in(tmp_path):
    import subprocess

    import pki

    pki.ensure_pki(tmp_path)
    pki.ensure_buildkit_pki(tmp_path)
    web = pki.web_stand_in_pki(tmp_path)
    for ca in (tmp_path, pki.buildkit_pki(tmp_path), web):
        assert (ca / "ca.crt").exists() and (ca / "ca.key").exists(), ca
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(web / "ca.crt"),
                               str(web / "server.crt")], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
    names = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                            str(web / "server.crt")], capture_output=True, text=True).stdout
    assert "DNS:astral.sh" in names and f"IP Address:{webstandins.ADDRESS}" in names, names
    before = (web / "server.crt").read_bytes()
    pki.ensure_pki(tmp_path)  # nothing to do the second time
    assert (web / "server.crt").read_bytes() == before


def test_uvs_python_downloads_are_this_machines_builds_in_uvs_layout(tmp_path, monkeypatch):
    """`cpython.ensure_uv_downloads` (run by `up`) packs each minor's pyenv build as uv
    unpacks its downloads, the interpreter finding its libpython beside it; the stand-in
    serves the metadata for its own URL and the archives, nothing else."""
    import hashlib
    import json
    import tarfile

    import cpython

    versions = tmp_path / "versions"
    build = versions / "3.13.4"
    (build / "bin").mkdir(parents=True)
    (build / "lib" / "python3.13").mkdir(parents=True)
    runpath = f"{build}/lib".encode()
    (build / "bin" / "python3.13").write_bytes(b"\x7fELF\x00" + runpath + b"\x00rest")
    (build / "bin" / "pip3").write_text(f"#!{build}/bin/python3.13\n")
    (build / "lib" / "python3.13" / "os.py").write_text("# stdlib\n")
    monkeypatch.setattr(cpython, "PYENV_VERSIONS", versions)
    cache = tmp_path / "cache"
    python = cache / "python"
    python.mkdir(parents=True)
    (python / "cpython-3.12.0+pyenv-x86_64-unknown-linux-gnu-install_only.tar.gz").write_text("")
    (archive,) = cpython.ensure_uv_downloads(python)
    assert not (python / "cpython-3.12.0+pyenv-x86_64-unknown-linux-gnu-install_only.tar.gz"
                ).exists()  # a build no longer on the machine
    with tarfile.open(archive) as tar:
        exe = tar.extractfile("python/bin/python3.13").read()
        assert tar.extractfile("python/bin/pip3").read() == b"#!/install/bin/python3.13\n"
        assert "python/lib/python3.13/os.py" in tar.getnames()
    assert b"$ORIGIN/../lib\x00" in exe and runpath not in exe and len(exe) == len(
        b"\x7fELF\x00" + runpath + b"\x00rest")
    (entry,) = json.loads((python / "downloads.json").read_text()).values()
    assert (entry["major"], entry["minor"], entry["patch"], entry["os"], entry["libc"]) == (
        3, 13, 4, "linux", "gnu")
    assert entry["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()

    status, body, _ = webstandins.answer(f"{webstandins.PYTHONS}/downloads.json", cache)
    served = json.loads(body)
    url = f"https://astral.sh{webstandins.PYTHONS}/{archive.name}"
    assert status == 200 and served["cpython-3.13.4-linux-x86_64-gnu"]["url"] == url
    assert webstandins.answer(url.removeprefix("https://astral.sh"), cache)[1] == archive
    encoded = url.removeprefix("https://astral.sh").replace("+", "%2B")  # as upstream's URLs
    assert webstandins.answer(encoded, cache)[1] == archive
    for bad in ("../../../etc/passwd", "downloads.json/..", f"{archive.name}.sha256", "x.tar.gz"):
        assert webstandins.answer(f"{webstandins.PYTHONS}/{bad}", cache)[0] == 404, bad
    before = archive.stat().st_mtime_ns
    assert cpython.ensure_uv_downloads(python) == [archive]  # made once
    assert archive.stat().st_mtime_ns == before
    (python / "made-by").write_text("another version of cpython.py\n")
    packed = archive.read_bytes()
    cpython.ensure_uv_downloads(python)  # made again by this one, to the same bytes
    assert archive.stat().st_mtime_ns != before and archive.read_bytes() == packed

    # An interpreter that loads a libpython it would not find from uv's folder gets no
    # download; a static one (no libpython) needs no rewrite.
    (build / "bin" / "python3.13").write_bytes(b"\x7fELF\x00libpython3.13.so.1.0\x00")
    (python / "made-by").write_text("again\n")
    assert cpython.ensure_uv_downloads(python) == [] and not archive.exists()
    assert json.loads((python / "downloads.json").read_text()) == {}
    (build / "bin" / "python3.13").write_bytes(b"\x7fELF\x00static\x00")
    assert cpython.ensure_uv_downloads(python) == [archive]
