"""A real image registry and a real BuildKit daemon for the local cluster, so that tasks with only
a Dockerfile build in the cluster (Shipyard's `ImageBuild` Jobs run `buildctl` against them).

Both run as host processes, like containerd, rather than as pods: buildkitd must be privileged and
must reach the registry on the host's loopback (where the kubelet pulls from, over plain HTTP with
no containerd change); its `RUN` steps do not run on the host's network but on a build network of
their own that reaches the outside world only (buildnet.py); as host processes they need
no image of their own, are up before any test namespace, and `down` stops them by pid with the
rest. The chart ships buildkitd as a Deployment + Service for real clusters instead.

- `registry` (CNCF distribution v3) on 127.0.0.1:5055, storage in the cache (kept across `down`);
- `buildkitd` (v0.34.2, OCI worker, CNI build network) on a unix socket (for `up`) and tcp
  127.0.0.1:1234 with mutual TLS: a CA of its own (pki.ensure_buildkit_pki), whose client
  certificate only build Jobs get; mirrors so that `FROM python:3.12-slim` or `ghcr.io/...`
  resolve to the local registry;
- the builder image `localhost/shipyard/buildctl:<version>` (busybox + buildctl) for build Jobs.

Both binaries come from the Go module proxy through the small wrapper modules in ./buildkit and
./registry (buildkit's go.mod has an `exclude` block, which `go install pkg@version` refuses).

**Base images are stand-ins** (a test convenience, not a product feature): the registry is seeded
at `up` with Debian bookworm images under the paths of common bases (`library/debian:bookworm`,
`library/ubuntu:24.04`, `library/python:3.12-slim`, ...). Each carries the label
`dev.shipyard.stand-in`. The python ones carry the CPython of their tag's minor version in
/usr/local, as upstream's do, where this machine has one built by pyenv (its 3.10, 3.12 and 3.13:
`cpython_layer`); else, and for 3.11, Debian's python3 (3.11) with `python`/`pip` links.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import buildnet
from cpython import CODE as CPYTHON_CODE
from cpython import PYTHON_MINORS, copy_cpython, pyenv_cpython
from images import Image, _busybox_rootfs, build_archive, ensure_imported
from kuberouter import BuildError
from layout import HERE, IMAGE_DEBIAN, Layout
from pki import buildkit_pki, ensure_buildkit_pki, web_stand_in_pki
from webstandins import cache_dir, python_downloads_json

BUILDKIT_VERSION = "v0.34.2"  # keep in step with buildkit/go.mod
REGISTRY_VERSION = "v3.1.2"  # keep in step with registry/go.mod
REGISTRY_PORT = 5055
REGISTRY = f"127.0.0.1:{REGISTRY_PORT}"
BUILDKIT_PORT = 1234
BUILDKIT_ADDR = f"tcp://127.0.0.1:{BUILDKIT_PORT}"
IMAGE_BUILDCTL = f"localhost/shipyard/buildctl:{BUILDKIT_VERSION}"
# Path-preserving mirrors: docker.io/library/x -> REGISTRY/library/x, ghcr.io/o/x ->
# REGISTRY/ghcr.io/o/x (the operator and the chart use the same map).
MIRRORS = {
    "docker.io": REGISTRY,
    "ghcr.io": f"{REGISTRY}/ghcr.io",
    "quay.io": f"{REGISTRY}/quay.io",
    "gcr.io": f"{REGISTRY}/gcr.io",
    # Amazon's copy of Docker Hub's library, which task authors use against Hub's rate limits:
    # public.ecr.aws/docker/library/x is served by x's stand-in (`_tags`).
    "public.ecr.aws": f"{REGISTRY}/public.ecr.aws",
}
ECR_LIBRARY = "public.ecr.aws/docker/library/"
STAND_IN_LABEL = "dev.shipyard.stand-in"
WEB_CA_NAME = "shipyard-localcluster-web-stand-ins.crt"
BASE_REPO = f"{REGISTRY}/shipyard/debian-base:bookworm"
# The host's trust store goes into the stand-ins, so that RUN steps reach PyPI and HTTPS hosts
# from behind the same TLS-intercepting proxy as the host (as on this project's machines).
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")
# Tools with trust stores of their own (uv, Rust's rustls) are pointed at it as on the host.
# uv is pointed at the stand-in for its Python downloads (webstandins.PYTHONS), which are on
# GitHub upstream: `uvx -p 3.13` gets this machine's CPython 3.13 (cpython.py). uv reads the
# list from a local file only (before 0.9.x at least), so each image carries it.
UV_PYTHONS_JSON = "/usr/local/share/shipyard-stand-in/uv-python-downloads.json"
_TRUST = ("COPY host-ca/ /usr/local/share/ca-certificates/\n"
          "COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"
          "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n"
          f"COPY uv-python-downloads.json {UV_PYTHONS_JSON}\n"
          f"ENV UV_PYTHON_DOWNLOADS_JSON_URL={UV_PYTHONS_JSON}\n")
# name -> (Dockerfile, tags): built with the local buildkitd at `up` when missing.
STAND_INS = {
    "debian": (
        f"FROM {BASE_REPO}\n" + _TRUST +
        f'LABEL {STAND_IN_LABEL}="Debian bookworm minbase (bash, coreutils, tar, python3, '
        'procps): a local test stand-in, not the upstream image"\n',
        ["library/debian:bookworm", "library/debian:bookworm-slim", "library/debian:12",
         "library/debian:12-slim", "library/ubuntu:24.04", "library/ubuntu:22.04",
         "library/ubuntu:latest", "library/ubuntu:26.04", "library/debian:latest"],
    ),
    "python": (
        f"FROM {BASE_REPO}\n" + _TRUST +
        "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends python3-pip python3-venv ca-certificates >/dev/null "
        "&& rm -rf /var/lib/apt/lists/* "
        "&& ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 "
        "/usr/local/bin/pip\n"
        "ENV PIP_BREAK_SYSTEM_PACKAGES=1\n"
        f'LABEL {STAND_IN_LABEL}="Debian bookworm with Debian\'s python3 (3.11), pip and venv: '
        'a local test stand-in, not the upstream python image"\n',
        [],  # the tags of each minor without a CPython of its own (below)
    ),
}
_APT = ("RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends {} >/dev/null && rm -rf /var/lib/apt/lists/*\n")
# ---------------------------------------------------------------- CPython from pyenv
CPYTHON_FROM_PYENV = ("3.10", "3.12", "3.13")  # 3.11: Debian's own is that minor
# What the copied CPython loads (its libpython, ssl, sqlite3, ctypes, readline, ...), as the
# upstream slim images install them.
_CPYTHON_LIBS = ("ca-certificates netbase tzdata libssl3 libffi8 libsqlite3-0 libuuid1 "
                 "libbz2-1.0 liblzma5 libreadline8 libncursesw6 libtinfo6 zlib1g libexpat1 "
                 "libcrypt1")


def _python_tags(minor: str) -> list[str]:
    return [f"library/python:{minor}{s}" for s in ("", "-slim", "-slim-bookworm", "-bookworm")]


def cpython_layer(minor: str) -> str:
    """Dockerfile lines that put the context's `cpython-<minor>/` (cpython.copy_cpython) in
    /usr/local."""
    return (_APT.format(_CPYTHON_LIBS) + f"COPY cpython-{minor}/ /usr/local/\n"
            "RUN ldconfig && ln -sf python3 /usr/local/bin/python "
            "&& ln -sf pip3 /usr/local/bin/pip "
            f"&& /usr/local/bin/python{minor} -c 'import ssl, sqlite3, ctypes, readline'\n")


for _minor in PYTHON_MINORS:
    if _minor in CPYTHON_FROM_PYENV and (_build := pyenv_cpython(_minor)) is not None:
        STAND_INS[f"python-{_minor}"] = (
            f"FROM {BASE_REPO}\n" + _TRUST + cpython_layer(_minor)
            + f"# {_build.name} {CPYTHON_CODE[:12]}\n"  # another build or copy, another image
            + f'LABEL {STAND_IN_LABEL}="Debian bookworm with CPython {_build.name} (this '
            f"machine's pyenv build) in /usr/local: a local test stand-in, not the upstream "
            'python image"\n', _python_tags(_minor))
    else:
        STAND_INS["python"][1].extend(_python_tags(_minor))
# Go from the Go module proxy's toolchain modules (golang.org/toolchain), the real release;
# the module zips keep no file modes, so bin/ and pkg/tool/ are made executable (as `go` does).
_GO = ('RUN python3 -c "import io, os, urllib.request, zipfile; '
       "v='{v}'; p='golang.org/toolchain@v0.0.1-go'+v+'.linux-amd64/'; "
       "z=zipfile.ZipFile(io.BytesIO(urllib.request.urlopen('https://proxy.golang.org/"
       "golang.org/toolchain/@v/v0.0.1-go'+v+'.linux-amd64.zip').read())); "
       "[(z.extract(i, '/tmp/go'), os.chmod('/tmp/go/'+i.filename, 0o755 if '/bin/' in "
       "i.filename or '/pkg/tool/' in i.filename else 0o644)) for i in z.infolist() "
       "if not i.is_dir()]; os.rename('/tmp/go/'+p, '/usr/local/go')\" "
       "&& rm -rf /tmp/go\n"
       "ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:"
       "/usr/sbin:/usr/bin:/sbin:/bin\n")
# (minor, the release its stand-in carries, other releases of that minor its tags name): the
# releases public tasks pin; the newest minor is also `1` and `latest`.
_GO_RELEASES = (("1.26", "1.26.2", ("1.26.0",)), ("1.25", "1.25.0", ()), ("1.24", "1.24.0", ()),
                ("1.23", "1.23.4", ()), ("1.22", "1.22.12", ("1.22.7",)))
for _minor, _patch, _others in _GO_RELEASES:
    STAND_INS[f"golang-{_minor}"] = (
        f"FROM {BASE_REPO}\n" + _TRUST
        + _APT.format("ca-certificates git gcc libc6-dev make curl") + _GO.format(v=_patch)
        + f'LABEL {STAND_IN_LABEL}="Debian bookworm with Go {_patch} from the Go module proxy\'s '
        'toolchain module: a local test stand-in, not the upstream golang image"\n',
        [f"library/golang:{t}{s}" for t in (_minor, _patch, *_others) for s in ("", "-bookworm")]
        + ([f"library/golang:{t}" for t in ("1", "latest", "bookworm", "1-bookworm")]
           if _minor == _GO_RELEASES[0][0] else []))
STAND_INS["gcc"] = (
    f"FROM {BASE_REPO}\n" + _TRUST + _APT.format("ca-certificates build-essential git curl")
    + f'LABEL {STAND_IN_LABEL}="Debian bookworm with Debian\'s gcc (12) and build-essential, '
    'whatever the tag says: a local test stand-in, not the upstream gcc image"\n',
    [f"library/gcc:{v}{s}" for v in ("12", "13", "14", "latest", "13.3.0", "14.2.0")
     for s in ("", "-bookworm")])
STAND_INS["node"] = (
    f"FROM {BASE_REPO}\n" + _TRUST + _APT.format("ca-certificates nodejs npm git curl")
    + f'LABEL {STAND_IN_LABEL}="Debian bookworm with Debian\'s nodejs (18) and npm, whatever '
    'the tag says: a local test stand-in, not the upstream node image"\n',
    [f"library/node:{v}{s}" for v in ("18", "20", "22", "24", "lts", "latest")
     for s in ("", "-slim", "-bookworm", "-bookworm-slim")])
STAND_INS["temurin-17"] = (
    f"FROM {BASE_REPO}\n" + _TRUST + _APT.format("ca-certificates openjdk-17-jdk-headless curl")
    + "ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64\n"
    + f'LABEL {STAND_IN_LABEL}="Debian bookworm with Debian\'s OpenJDK 17, whatever the tag '
    'says: a local test stand-in, not the upstream eclipse-temurin image"\n',
    [f"library/eclipse-temurin:{t}" for t in ("17", "17-jdk", "17-jdk-jammy", "17-jammy",
                                              "17.0.12_7-jdk-jammy", "17-jdk-focal")])
_APK = """\
COPY <<'EOF' /sbin/apk
#!/bin/sh
# A stand-in's apk: `apk add`/`del`/`update` with the Debian packages of the same names.
cmd=$1; [ $# -gt 0 ] && shift
pkgs=; skip=
for a in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case "$a" in --virtual|-t|--repository|-X) skip=1 ;; -*) ;; *) pkgs="$pkgs $a" ;; esac
done
export DEBIAN_FRONTEND=noninteractive
case "$cmd" in
  add) apt-get update -qq && apt-get install -y -qq --no-install-recommends $pkgs ;;
  del) apt-get remove -y -qq $pkgs ;;
  update) apt-get update -qq ;;
  *) echo "stand-in apk: '$cmd' is not supported" >&2; exit 1 ;;
esac
EOF
RUN chmod +x /sbin/apk
"""
STAND_INS["alpine"] = (
    f"FROM {BASE_REPO}\n" + _TRUST + _APK
    + f'LABEL {STAND_IN_LABEL}="Debian bookworm posing as Alpine (its apk installs Debian '
    'packages of the same names): a local test stand-in, not the upstream alpine image"\n',
    [f"library/alpine:{t}" for t in ("3.18", "3.19", "3.20", "3.21", "3.22", "latest")])
# uv's image holds /uv and /uvx (for `COPY --from=ghcr.io/astral-sh/uv`): the same binaries
# from uv's wheel on PyPI, one stand-in per release real tasks pin (the newest also `latest`).
UV_VERSIONS = ("0.9.7", "0.8.15")
for _uv in UV_VERSIONS:
    STAND_INS[f"uv-{_uv}"] = (
        f"FROM {BASE_REPO}\n" + _TRUST + _APT.format("ca-certificates python3-pip")
        + f"RUN pip install --break-system-packages --no-cache-dir -q uv=={_uv} "
        "&& cp /usr/local/bin/uv /usr/local/bin/uvx / && /uv --version\n"
        + f'LABEL {STAND_IN_LABEL}="Debian bookworm with /uv and /uvx {_uv} from uv\'s wheel '
        'on PyPI: a local test stand-in, not the upstream uv image"\n',
        [f"ghcr.io/astral-sh/uv:{t}" for t in (_uv, _uv.rsplit(".", 1)[0])]
        + (["ghcr.io/astral-sh/uv:latest"] if _uv == UV_VERSIONS[0] else []))
_TB = "ghcr.io/laude-institute/t-bench/"
_TB_PYTHON = [f"{_TB}python-3-13:{t}" for t in ("latest", "20250620")]
STAND_INS["t-bench"] = (
    f"FROM {BASE_REPO}\n" + _TRUST
    + _APT.format("ca-certificates tmux curl python3-pip python3-venv")
    + "ENV PIP_BREAK_SYSTEM_PACKAGES=1\n"
    + f'LABEL {STAND_IN_LABEL}="Debian bookworm with tmux, curl and Debian\'s python3 (3.11) in '
    'place of the terminal-bench base images: a local test stand-in"\n',
    [f"{_TB}ubuntu-24-04:{t}" for t in ("latest", "20250620", "20250624")])
if (_build := pyenv_cpython("3.13")) is not None:
    # terminal-bench's python-3-13 is python:3.13-slim-bookworm with tmux and curl.
    STAND_INS["t-bench-python-3.13"] = (
        f"FROM {BASE_REPO}\n" + _TRUST + _APT.format("tmux curl") + cpython_layer("3.13")
        + f"# {_build.name} {CPYTHON_CODE[:12]}\n"
        + f'LABEL {STAND_IN_LABEL}="Debian bookworm with tmux, curl and CPython {_build.name} '
        "(this machine's pyenv build) in /usr/local in place of terminal-bench's python-3-13 "
        'image: a local test stand-in"\n', _TB_PYTHON)
else:
    STAND_INS["t-bench"][1].extend(_TB_PYTHON)


def buildkit_dir(layout: Layout) -> Path:
    return layout.cache / f"buildkit-{BUILDKIT_VERSION}"


def registry_dir(layout: Layout) -> Path:
    return layout.cache / f"registry-{REGISTRY_VERSION}"


def registry_storage(layout: Layout) -> Path:
    """Seeds and built images: kept across `down` (a cache, like the image archives)."""
    return layout.cache / "registry-data"


def _go_build(module: str, out: Path, packages: list[str], ldflags: str) -> None:
    if shutil.which("go") is None:
        raise BuildError(f"Go is needed to build {module} and is not on PATH")
    partial = out.with_name(out.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    result = subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", f"{partial}/", *packages],
        cwd=HERE / module, env=env, capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise BuildError(f"building {module} failed:\n{result.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


def ensure_binaries(layout: Layout) -> None:
    """buildctl, buildkitd and registry, once per version. Cold, the two builds run in parallel
    (about 2.5 min on 2 cores with downloads); warm, nothing happens."""
    jobs = []
    if not (buildkit_dir(layout) / "buildkitd").exists():
        jobs.append(("buildkit", buildkit_dir(layout),
                     ["github.com/moby/buildkit/cmd/buildctl",
                      "github.com/moby/buildkit/cmd/buildkitd"],
                     f"-s -w -X github.com/moby/buildkit/version.Version={BUILDKIT_VERSION}"))
    if not (registry_dir(layout) / "registry").exists():
        jobs.append(("registry", registry_dir(layout),
                     ["github.com/distribution/distribution/v3/cmd/registry"], "-s -w"))
    errors: list[BaseException] = []

    def run(job) -> None:
        try:
            _go_build(*job)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# ---------------------------------------------------------------- configuration


def registry_config(layout: Layout) -> Path:
    return layout.state / "registry.yml"


def buildkitd_config(layout: Layout) -> Path:
    return layout.state / "buildkitd.toml"


def buildkit_sock(layout: Layout) -> Path:
    return layout.run / "buildkitd.sock"


def write_configs(layout: Layout) -> None:
    ensure_build_network(layout)
    registry_config(layout).write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage:\n  filesystem: {{rootdirectory: {registry_storage(layout)}}}\n"
        "  delete: {enabled: true}\n"
        f"http: {{addr: '{REGISTRY}'}}\n"
    )
    buildkitd_config(layout).write_text(_buildkitd_config_text(layout))


def _buildkitd_config_text(layout: Layout) -> str:
    mirrors = "".join(
        f'[registry."{host}"]\n  mirrors = ["{mirror}"]\n' for host, mirror in MIRRORS.items()
    )
    tls = buildkit_pki(layout.pki)
    return (
        f'root = "{layout.state / "buildkit"}"\n'
        "[grpc]\n"
        f'  address = ["unix://{buildkit_sock(layout)}", "{BUILDKIT_ADDR}"]\n'
        # mTLS on the TCP listener; the unix socket (no TLS) stays for `up`'s own seed builds.
        "  [grpc.tls]\n"
        f'    cert = "{tls / "server.crt"}"\n    key = "{tls / "server.key"}"\n'
        f'    ca = "{tls / "ca.crt"}"\n'
        "[worker.oci]\n  enabled = true\n  gc = true\n  gckeepstorage = 10000\n"
        # RUN steps in a network namespace of their own on the build bridge (buildnet.py).
        '  networkMode = "cni"\n'
        f'  cniConfigPath = "{buildnet.cni_config_path(layout)}"\n'
        '  cniBinaryPath = "/usr/lib/cni"\n  cniPoolSize = 4\n'
        "[worker.containerd]\n  enabled = false\n"
        f'[registry."{REGISTRY}"]\n  http = true\n  insecure = true\n'
        + mirrors
    )


def ensure_build_network(layout: Layout) -> None:
    """The build bridge's CNI config, its firewall chain, the `RUN` steps' PID limit and
    buildkitd's certificates (idempotent; on every `up`, also when the running cluster is
    reused)."""
    ensure_buildkit_pki(layout.pki)
    buildnet.write_config(layout)
    buildnet.apply()
    if not buildnet.limit_build_processes():
        print("  warning: no pids cgroup controller: build steps' processes are not limited",
              flush=True)


def registry_argv(layout: Layout) -> list[str]:
    return [str(registry_dir(layout) / "registry"), "serve", str(registry_config(layout))]


def buildkitd_argv(layout: Layout) -> list[str]:
    return [str(buildkit_dir(layout) / "buildkitd"), "--config", str(buildkitd_config(layout))]


def buildkitd_started_config(layout: Layout) -> Path:
    """A copy of the configuration the running buildkitd started with."""
    return layout.run / "buildkitd.toml.started"


def record_buildkitd_config(layout: Layout) -> None:
    buildkitd_started_config(layout).write_text(buildkitd_config(layout).read_text())


def buildkitd_config_current(layout: Layout) -> bool:
    """False when buildkitd runs with an older configuration than the one written now (for
    example host network and plain TCP): `up` restarts it once."""
    try:
        return (buildkitd_started_config(layout).read_text()
                == buildkitd_config(layout).read_text())
    except FileNotFoundError:
        return False


def buildctl(layout: Layout) -> str:
    return str(buildkit_dir(layout) / "buildctl")


def client_tls_dir(layout: Layout) -> Path:
    """The build Jobs' certificate, key and CA, named as in a TLS Secret
    (SHIPYARD_BUILDKIT_TLS_DIR)."""
    return buildkit_pki(layout.pki) / "client-secret"


def tcp_client_args(layout: Layout) -> list[str]:
    """buildctl's global flags for buildkitd's TCP address (mutual TLS)."""
    d = client_tls_dir(layout)
    return ["--addr", BUILDKIT_ADDR, "--tlscacert", str(d / "ca.crt"),
            "--tlscert", str(d / "tls.crt"), "--tlskey", str(d / "tls.key")]


# ---------------------------------------------------------------- health


def registry_healthy() -> bool:
    with urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=2) as resp:
        return resp.status == 200


def buildkitd_healthy(layout: Layout) -> bool:
    result = subprocess.run(
        [buildctl(layout), "--addr", f"unix://{buildkit_sock(layout)}", "debug", "workers"],
        capture_output=True, timeout=10,
    )
    return result.returncode == 0


def manifest_exists(ref: str) -> bool:
    """HEAD on the manifest of `repo:tag` in the local registry."""
    repo, tag = ref.rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repo}/manifests/{tag}", method="HEAD",
        headers={"Accept": "application/vnd.oci.image.index.v1+json, "
                           "application/vnd.oci.image.manifest.v1+json, "
                           "application/vnd.docker.distribution.manifest.v2+json, "
                           "application/vnd.docker.distribution.manifest.list.v2+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return False
        raise


# ---------------------------------------------------------------- seeds and the builder image


def _buildctl_rootfs(layout: Layout, root: Path) -> None:
    _busybox_rootfs(layout, root)
    (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(buildkit_dir(layout) / "buildctl", root / "usr" / "bin" / "buildctl")


BUILDCTL_IMAGE = Image(IMAGE_BUILDCTL, f"buildctl-{BUILDKIT_VERSION}.tar", _buildctl_rootfs,
                       ("/bin/sh",))


def ensure_builder_image(layout: Layout) -> None:
    ensure_imported(layout, BUILDCTL_IMAGE)


def uv_python_downloads(layout: Layout) -> bytes:
    """uv's Python download list as the stand-in images carry it (`{}`, nothing to download,
    before `up` made one)."""
    return python_downloads_json(cache_dir(layout.cache)) or b"{}\n"


def ensure_seeds(layout: Layout) -> list[str]:
    """Push the Debian base and build the stand-ins that are missing; the names pushed."""
    pushed = []
    if not manifest_exists(BASE_REPO.split("/", 1)[1]):
        debian = next(i for i in _images() if i.tag == IMAGE_DEBIAN)
        archive = build_archive(layout, debian)
        subprocess.run(
            ["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
             f"docker-archive:{archive}", f"docker://{BASE_REPO}"],
            check=True, capture_output=True, text=True,
        )
        pushed.append(BASE_REPO)
    trust = HOST_CA_BUNDLE.read_bytes() if HOST_CA_BUNDLE.exists() else b""
    extra = sorted(HOST_EXTRA_CAS.glob("*.crt")) if HOST_EXTRA_CAS.is_dir() else []
    # The web stand-ins' CA (webstandins.py): trusted in the stand-ins only, not on the host.
    web_ca = web_stand_in_pki(layout.pki) / "ca.crt"
    if web_ca.exists():
        trust = trust.rstrip(b"\n") + b"\n" + web_ca.read_bytes()
        extra.append(web_ca)
    uv_pythons = uv_python_downloads(layout)
    for name, (dockerfile, tags) in STAND_INS.items():
        # A marker tag per content: a changed Dockerfile, host trust store or list of uv's
        # Pythons rebuilds.
        content = hashlib.sha256(dockerfile.encode() + trust + uv_pythons + b"".join(
            p.read_bytes() for p in extra)).hexdigest()[:12]
        marker_tag = f"shipyard/stand-ins:{name}-{content}"
        tags = [*_tags(tags), marker_tag]
        missing = [t for t in tags if not manifest_exists(t)]
        if not missing:
            continue
        if marker_tag not in missing:  # built already: only new names of it (a copy)
            for tag in missing:
                subprocess.run(
                    ["skopeo", "copy", "--quiet", "--src-tls-verify=false",
                     "--dest-tls-verify=false", f"docker://{REGISTRY}/{marker_tag}",
                     f"docker://{REGISTRY}/{tag}"], check=True, capture_output=True, text=True)
            pushed += missing
            continue
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "Dockerfile").write_text(dockerfile)
            for minor in re.findall(r"^COPY cpython-(\d+\.\d+)/", dockerfile, re.M):
                copy_cpython(pyenv_cpython(minor), Path(tmp, f"cpython-{minor}"))
            Path(tmp, "ca-certificates.crt").write_bytes(trust)
            Path(tmp, "uv-python-downloads.json").write_bytes(uv_pythons)
            Path(tmp, "host-ca").mkdir()
            for cert in extra:
                shutil.copy2(cert, Path(tmp, "host-ca", WEB_CA_NAME if cert == web_ca
                                        else cert.name))
            names = ",".join(f"{REGISTRY}/{t}" for t in tags)
            result = subprocess.run(
                [buildctl(layout), "--addr", f"unix://{buildkit_sock(layout)}", "build",
                 "--frontend", "dockerfile.v0", "--local", f"context={tmp}",
                 "--local", f"dockerfile={tmp}",
                 "--output", f'type=image,"name={names}",push=true,registry.insecure=true'],
                capture_output=True, text=True,
            )
            if result.returncode != 0:
                raise BuildError(f"building the {name} stand-in images failed:\n"
                                 f"{result.stderr[-3000:]}")
        pushed += tags
    return pushed


def _tags(tags: list[str]) -> list[str]:
    """A stand-in's names: each Docker Hub library name also under Amazon's copy of it."""
    return [*tags, *(ECR_LIBRARY + t.removeprefix("library/") for t in tags
                     if t.startswith("library/"))]


def _images() -> list[Image]:
    from images import IMAGES

    return IMAGES


def describe() -> str:
    return json.dumps({"registry": REGISTRY, "buildkit": BUILDKIT_ADDR, "mirrors": MIRRORS})
