"""Stand-ins for web hosts that public tasks' scripts fetch from and that this machine cannot
reach (no internet beyond the package registries): `astral.sh`, whose `uv/<version>/install.sh`
most Harbor tasks' tests pipe to `sh` before `uvx pytest`.

- Served over HTTPS at ADDRESS:443 by this file (`serve`, a component of the local cluster
  like the registry). ADDRESS is on the host's loopback and in the benchmarking range
  (198.18.0.0/15): outside the cluster's own ranges, so a trial pod reaches it as it would the
  internet, under the `public` network mode only (the operator's policies refuse the host's
  and the cluster's addresses, and `no-network` everything).
- The cluster DNS names it (`clusterdns.COREFILE`: `hosts`) for pods, and image builds get it
  in their `RUN` steps' /etc/hosts (the operator's SHIPYARD_BUILD_ADD_HOSTS,
  `operator_defaults.py`; `buildnet.rules` lets the build network reach ADDRESS:443 only); the
  host does not.
- Its certificate is issued by a CA of its own (`pki.ensure_web_stand_in_pki`), which the base
  image stand-ins trust (`imagebuilds.ensure_seeds`): a `curl https://astral.sh/...` in a task
  built on a stand-in verifies as it would upstream.
- Under /shipyard-stand-in/python/ it stands in for uv's Python downloads (GitHub's
  python-build-standalone releases, unreachable here): the archives of this machine's pyenv
  builds in uv's layout (`cpython.ensure_uv_downloads`, made by `up`), listed in
  `downloads.json` (the format of UV_PYTHON_DOWNLOADS_JSON_URL), which every stand-in image
  carries as a file and names to uv (uv 0.9 reads the list from a local file only), so that
  `uvx -p 3.13` and `uv python install` get a real CPython of that minor.
- What it serves is a stand-in, and says so: its `install.sh` installs uv of the version asked
  for from uv's wheel on PyPI (fetched by the host once per version) into `~/.local/bin`, with
  the `env` file uv's installer writes. Any other path answers 404.

    python3 webstandins.py serve PKI_DIR CACHE_DIR
"""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

ADDRESS = "198.18.0.1"
HOSTS = ("astral.sh",)
UV_LATEST = "0.9.7"  # what `astral.sh/uv/install.sh` (no version) installs
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_lock = threading.Lock()

INSTALLER = """\
#!/bin/sh
# Shipyard's local cluster: a stand-in for uv's installer at astral.sh (this machine has no
# internet beyond the package registries). It installs uv {version} from uv's wheel on PyPI.
set -eu
dest="${{UV_UNMANAGED_INSTALL:-${{UV_INSTALL_DIR:-${{XDG_BIN_HOME:-$HOME/.local/bin}}}}}}"
mkdir -p "$dest"
fetch() {{
  if command -v curl >/dev/null 2>&1; then curl -fsSL "$1" -o "$2"
  else wget -qO "$2" "$1"; fi
}}
for tool in uv uvx; do
  fetch "https://astral.sh/shipyard-stand-in/uv/{version}/$tool" "$dest/$tool"
  chmod 755 "$dest/$tool"
done
[ -n "${{UV_UNMANAGED_INSTALL:-}}" ] || cat > "$dest/env" <<EOF
#!/bin/sh
case ":\\${{PATH}}:" in
  *:"$dest":*) ;;
  *) export PATH="$dest:\\$PATH" ;;
esac
EOF
echo "installing to $dest (uv {version}: Shipyard's local stand-in for astral.sh)"
"""


def cache_dir(cache: Path) -> Path:
    """What the stand-ins keep (uv's binaries, uv's Pythons) in the local cluster's cache."""
    return cache / "web-stand-ins"


def argv(pki: Path, cache: Path) -> list[str]:
    """The component's command line: Debian's python3 where there is one (the same on each
    `up`, whichever Python runs localcluster.py), else this one."""
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    return [python, str(Path(__file__).resolve()), "serve", str(pki / "web-stand-ins"),
            str(cache_dir(cache))]


NFT_TABLE = "shipyard_web_stand_ins"
NFT_RULESET = (
    f"table inet {NFT_TABLE}\n"
    f"delete table inet {NFT_TABLE}\n"
    f"table inet {NFT_TABLE} {{\n"
    "  chain input {\n"
    # Before kube-router's and kube-proxy's filter chains: whatever they accept, ADDRESS
    # answers on 443 only. Every host daemon that listens on all addresses (the apiserver,
    # the kubelet, kube-router's health port) would otherwise be reachable there from
    # `public` pods, which the operator's policies keep off the host's other addresses.
    "    type filter hook input priority mangle; policy accept;\n"
    "    ct state established,related accept\n"
    f"    ip daddr {ADDRESS} tcp dport 443 accept\n"
    f"    ip daddr {ADDRESS} reject with icmpx admin-prohibited\n"
    "  }\n"
    "}\n"
)


def ensure_address() -> None:
    """ADDRESS on the host's loopback, answering on 443 only (both idempotent; the filter
    first, so the address is never open)."""
    subprocess.run(["nft", "-f", "-"], input=NFT_RULESET, text=True, check=True,
                   capture_output=True)
    shown = subprocess.run(["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True,
                           text=True, check=True).stdout
    if f" {ADDRESS}/" not in shown:
        subprocess.run(["ip", "addr", "add", f"{ADDRESS}/32", "dev", "lo"], check=True)


def remove_address() -> None:
    subprocess.run(["ip", "addr", "del", f"{ADDRESS}/32", "dev", "lo"], capture_output=True)
    subprocess.run(["nft", "delete", "table", "inet", NFT_TABLE], capture_output=True)


def uv_binaries(cache: Path, version: str) -> Path:
    """The folder holding `uv` and `uvx` of `version`, from uv's manylinux wheel on PyPI
    (downloaded once per version, through the host's proxy settings as pip would)."""
    out = cache / f"uv-{version}"
    if (out / "uvx").exists():
        return out
    with _lock:
        if (out / "uvx").exists():
            return out
        index = urllib.request.Request("https://pypi.org/simple/uv/", headers={
            "Accept": "application/vnd.pypi.simple.v1+json"})  # PEP 691, as pip reads it
        with urllib.request.urlopen(index, timeout=60) as r:
            files = json.load(r)["files"]
        wheel = next(f["url"] for f in files if f["filename"].startswith(f"uv-{version}-")
                     and "manylinux_2_17_x86_64" in f["filename"])
        with urllib.request.urlopen(wheel, timeout=300) as r:
            data = r.read()
        partial = out.with_name(out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                name = info.filename.rsplit("/", 1)[-1]
                if "/scripts/" in info.filename and name in ("uv", "uvx"):
                    (partial / name).write_bytes(z.read(info))
                    (partial / name).chmod(0o755)
        if not (partial / "uvx").exists():
            raise RuntimeError(f"uv {version}'s wheel has no scripts/uv and scripts/uvx")
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    return out


PYTHONS = "/shipyard-stand-in/python"
"""Where uv's Python downloads are stood in (`UV_PYTHON_DOWNLOADS_JSON_URL`, which the stand-in
images set): `downloads.json` and the archives `cpython.ensure_uv_downloads` made at `up`."""
_ARCHIVE = re.compile(r"^cpython-[0-9.]+\+pyenv-x86_64-unknown-linux-gnu-install_only\.tar\.gz$")


def python_downloads_json(cache: Path) -> bytes | None:
    """uv's Python download list that `up` made (cpython.ensure_uv_downloads), its archives at
    this stand-in; None before `up` made one. The stand-in images carry it too: uv 0.9 reads
    UV_PYTHON_DOWNLOADS_JSON_URL from a local file only."""
    made = cache / "python" / "downloads.json"
    if not made.is_file():
        return None
    return made.read_text().replace("{base}", f"https://{HOSTS[0]}{PYTHONS}").encode()


def python_download(path: str, cache: Path) -> tuple[int, bytes | Path, str] | None:
    """uv's Python download list or an archive (a Path, streamed); None for another path."""
    if not path.startswith(PYTHONS + "/"):
        return None
    name, folder = urllib.parse.unquote(path.removeprefix(PYTHONS + "/")), cache / "python"
    if name == "downloads.json" and (listed := python_downloads_json(cache)) is not None:
        return 200, listed, "application/json"
    if _ARCHIVE.match(name) and (folder / name).is_file():
        return 200, folder / name, "application/gzip"
    return 404, f"{path}: no such Python here (this machine's pyenv builds only)\n".encode(), \
        "text/plain"


def answer(path: str, cache: Path) -> tuple[int, bytes | Path, str]:
    """(status, body or a file to send, content type) for a GET of `path` on astral.sh."""
    path = path.split("?", 1)[0]
    if (python := python_download(path, cache)) is not None:
        return python
    if path in ("/uv/install.sh", "/uv/installer.sh"):
        path = f"/uv/{UV_LATEST}/install.sh"
    parts = path.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "uv" and parts[2] in ("install.sh", "installer.sh") \
            and _VERSION.match(parts[1]):
        return 200, INSTALLER.format(version=parts[1]).encode(), "text/x-sh"
    if len(parts) == 4 and parts[:2] == ["shipyard-stand-in", "uv"] \
            and _VERSION.match(parts[2]) and parts[3] in ("uv", "uvx"):
        try:
            folder = uv_binaries(cache, parts[2])
        except StopIteration:
            return 404, f"uv {parts[2]} has no manylinux x86_64 wheel on PyPI\n".encode(), \
                "text/plain"
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            return 404, f"uv {parts[2]} could not be fetched from PyPI: {e}\n".encode(), \
                "text/plain"
        return 200, folder / parts[3], "application/octet-stream"
    return 404, (f"{path}: Shipyard's local stand-in for astral.sh serves only "
                 "/uv/install.sh, /uv/<version>/install.sh and, for uv, "
                 f"{PYTHONS}/downloads.json\n").encode(), "text/plain"


def serve(pki: Path, cache: Path) -> None:
    ensure_address()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body, kind = answer(self.path, cache)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if isinstance(body, Path):
                with body.open("rb") as f:
                    self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
                    self.end_headers()
                    shutil.copyfileobj(f, self.wfile, 1 << 20)
                return
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    server = http.server.ThreadingHTTPServer((ADDRESS, 443), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    # the handshake in each request's thread, not in the accepting one
    server.socket = context.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit(__doc__.rsplit("\n\n", 1)[-1])
    serve(Path(sys.argv[2]), Path(sys.argv[3]))
