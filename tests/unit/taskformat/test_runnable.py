"""What the operator will do with a task that loads (taskformat.runnable; issue 23)."""

from __future__ import annotations

from shipyard.taskformat.runnable import refusal, verdicts
from tests.unit.helpers import HELLO_TOML, task


def test_a_windows_task_is_refused_by_its_os_or_its_base_image():
    windows = task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', "")
                   + 'os = "windows"\n', extra={"environment/Dockerfile": "FROM x\n",
                                                 "tests/test.bat": "echo 1\n",
                                                 "solution/solve.bat": "echo\n"},
                   drop=("tests/test.sh", "solution/solve.sh"))
    assert "Linux containers only" in refusal(windows)
    servercore = task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', ""), extra={
        "environment/Dockerfile": "FROM mcr.microsoft.com/windows/servercore:ltsc2025@sha256:ab"
                                  "\nRUN echo\n"})
    [v] = verdicts(servercore)
    assert v.refused and v.file == "environment/Dockerfile" and "Windows image" in v.message
    assert refusal(task()) is None


def test_an_unknown_environment_type_is_ignored_with_a_note_or_refused_without_an_image():
    with_image = task(HELLO_TOML + 'type = "cloudlab"\n')
    [v] = verdicts(with_image)
    assert not v.refused and "'cloudlab' is not a Harbor environment" in v.message
    no_image = task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', "")
                    + 'type = "vm-cluster"\n')
    assert "'vm-cluster' environments" in refusal(no_image)
    assert verdicts(task(HELLO_TOML + 'type = "docker"\n')) == []


def test_a_private_registry_image_needs_a_pull_secret():
    private = task(HELLO_TOML.replace("python:3.12-slim",
                                      "us-docker.pkg.dev/proj/repo/env:1"))
    [v] = verdicts(private)
    assert not v.refused and "imagePullSecrets" in v.message
    assert verdicts(private, pull_secrets=True) == []


def test_a_task_with_an_environment_dir_but_no_image_is_noted():
    bare = task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', ""),
                extra={"environment/.gitkeep": ""})
    [v] = verdicts(bare)
    assert not v.refused and v.file == "environment/Dockerfile"
    assert "spec.environment.image" in v.message
    # No environment/ at all (a task written for a fork's shared environment definition): the
    # same note, so that lint says what a Trial of it needs, not only that nothing is there.
    [none] = verdicts(task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', "")))
    assert not none.refused and "spec.environment.image" in none.message


def test_add_of_a_host_off_the_internet_is_a_caveat_and_other_urls_are_fine():
    dockerfile = (
        "FROM debian:bookworm\n"
        "ADD http://169.254.169.254/latest/meta-data/ /a\n"
        "add --chmod=644 https://127.0.0.1:6443/version http://10.96.0.1/x /b/\n"
        'ADD ["http://metadata.google.internal/computeMetadata/v1/", "/c"]\n'
        "ADD http://minio:9000/bucket/data.tar /d\n"
        "ADD https://[::1]:2379/ /e\n"
        "ADD https://pypi.org/simple/six/ /f\n"
        "ADD https://github.com/astral-sh/uv.git#0.9.7 /g\n"
        "ADD local/file.txt /h\n"
        "RUN curl http://127.0.0.1/ || true\n")
    found = verdicts(task(HELLO_TOML.replace('docker_image = "python:3.12-slim"\n', ""),
                          extra={"environment/Dockerfile": dockerfile}))
    assert all(not v.refused and v.field == "ADD" and v.file == "environment/Dockerfile"
               for v in found)
    assert len(found) == 6, found
    text = "\n".join(v.message for v in found)
    for url in ("http://169.254.169.254/latest/meta-data/", "https://127.0.0.1:6443/version",
                "http://10.96.0.1/x", "http://metadata.google.internal/computeMetadata/v1/",
                "http://minio:9000/bucket/data.tar", "https://[::1]:2379/"):
        assert f"{url}: " in text, url
    assert "pypi.org" not in text and "github.com" not in text and "curl" not in text
    assert "reaches the outside world only" in found[0].message


FETCHING_TESTS = ("#!/bin/bash\n# pip install in a comment is fine\n"
                  "pip install pytest==8.4.1 || true\ncurl -LsSf https://astral.sh/uv/install.sh"
                  " | sh\npytest /tests\n")


def test_a_test_script_that_fetches_without_a_network_is_a_caveat_naming_its_line():
    offline = task(HELLO_TOML.replace("[environment]\n", "[environment]\nallow_internet = false\n"),
                   extra={"tests/test.sh": FETCHING_TESTS})
    [v] = verdicts(offline)
    assert not v.refused and (v.file, v.field) == ("tests/test.sh", "line 3")
    assert "'pip install pytest==8.4.1 || true' fetches from the network" in v.message
    # A verifier with a network, a fetch of what is local, or an offline install: nothing to say.
    assert verdicts(task(extra={"tests/test.sh": FETCHING_TESTS})) == []
    local = ("pip install --no-index --find-links /wheels x\ncurl -s localhost:8080/health\n"
             "pytest /tests\n")
    assert verdicts(task(HELLO_TOML.replace("[environment]\n",
                                            '[environment]\nnetwork_mode = "no-network"\n'),
                         extra={"tests/test.sh": local})) == []
