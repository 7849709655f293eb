"""docker-compose environments: parsing, interpolation and refusals (issue 25)."""

from __future__ import annotations

import pytest

from shipyard.taskformat import TaskFormatError, load_task_files
from shipyard.taskformat.compose import (
    HOST_LOGS_ROOT,
    Healthcheck,
    ServiceBuild,
    VolumeMount,
    compose_files,
    compose_refusals,
    interpolate,
    load_compose,
    parse_duration,
    parse_memory_mb,
)

BASE = {
    "task.toml": 'schema_version = "1.4"\n[environment]\ncpus = 2\nmemory_mb = 1024\n'
                 '[environment.env]\nDB_NAME = "shop"\n',
    "instruction.md": "Do it.\n",
    "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    "environment/Dockerfile": "FROM debian:bookworm\n",
    "environment/db/Dockerfile": "FROM debian:bookworm\n",
    "environment/db/db.env": "# comment\nDB_USER=admin\nexport DB_PASS='s3cret'\n",
}

FULL = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    command: ["sh", "-c", "sleep infinity"]
    environment:
      - DB_URL=http://db:8080
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}
      - shared:/shared
    deploy:
      resources:
        limits: {cpus: "${CPUS}", memory: "${MEMORY}"}
    depends_on:
      db:
        condition: service_healthy
  db:
    build: ./db
    command: python3 -m http.server ${PORT:-8080}
    working_dir: /srv
    user: "1000"
    env_file: db/db.env
    environment:
      NAME: ${DB_NAME}
      EMPTY:
    mem_limit: 256m
    cpus: 0.5
    expose: ["8080"]
    volumes:
      - shared:/data:ro
      - ${HOST_ARTIFACTS_PATH}:/evidence
    healthcheck:
      test: ["CMD", "python3", "-c", "print(1)"]
      interval: 2s
      timeout: 1s
      retries: 5
      start_period: 1m30s
    restart: always
    networks:
      default:
        aliases: [database]
  cache:
    image: localhost/cache:1
    depends_on: [db]
    healthcheck:
      test: wget -q -O- localhost:6379
volumes:
  shared: {}
"""


def _task(compose: str | None = FULL, **extra: str | None):
    files = {k: v for k, v in dict(BASE, **extra).items() if v is not None}
    if compose is not None:
        files["environment/docker-compose.yaml"] = compose
    return load_task_files({k: v.encode() for k, v in files.items()}, name="shop")


def _reasons(compose: str, **extra: str | None) -> list[str]:
    return [str(e) for e in compose_refusals(_task(compose, **extra))]


def test_a_task_without_compose_has_no_refusal_and_no_environment():
    task = _task(None)
    assert compose_refusals(task) == [] and load_compose(task) is None


def test_full_file_translates_every_field():
    task = _task()
    assert compose_files(task) == ["environment/docker-compose.yaml"]
    assert compose_refusals(task) == []
    env = load_compose(task)
    assert env is not None
    assert [s.name for s in env.services] == ["main", "db", "cache"]
    main, db, cache = env.services
    assert main.build == ServiceBuild("environment/", "Dockerfile")
    assert main.image == "hb__shop" and main.cpus == 2 and main.memory_mb == 1024
    assert main.environment == {"DB_URL": "http://db:8080"}
    assert main.depends_on == {"db": "service_healthy"}
    assert VolumeMount("logs", "verifier", "/logs/verifier") in main.volumes
    assert VolumeMount("named", "shared", "/shared") in main.volumes
    assert db.build == ServiceBuild("environment/db/", "Dockerfile")
    assert db.command == ("python3", "-m", "http.server", "8080")
    assert db.working_dir == "/srv" and db.user == "1000"
    assert db.environment == {"DB_USER": "admin", "DB_PASS": "s3cret", "NAME": "shop",
                              "EMPTY": ""}
    assert db.memory_mb == 256 and db.cpus == 0.5 and db.ports == (8080,)
    assert db.volumes == (VolumeMount("named", "shared", "/data", True),
                          VolumeMount("logs", "artifacts", "/evidence"))
    assert db.healthcheck == Healthcheck(("python3", "-c", "print(1)"), 2.0, 1.0, 5, 90.0)
    assert db.aliases == ("database",)
    assert cache.depends_on == {"db": "service_started"}
    assert cache.healthcheck is not None
    assert cache.healthcheck.command == ("/bin/sh", "-c", "wget -q -O- localhost:6379")
    assert env.sidecars == (db, cache)


def test_start_order_puts_dependencies_first():
    compose = """\
services:
  main: {image: x}
  web: {image: w, depends_on: [api]}
  api: {image: a, depends_on: {db: {condition: service_completed_successfully}}}
  db: {image: d}
"""
    env = load_compose(_task(compose))
    assert env is not None and [s.name for s in env.services] == ["main", "db", "api", "web"]


@pytest.mark.parametrize(("text", "expected"), [
    ("${A}", "1"), ("$A-x", "1-x"), ("${MISSING}", ""), ("${MISSING:-d}", "d"),
    ("${EMPTY:-d}", "d"), ("${EMPTY-d}", ""), ("${A:+alt}", "alt"), ("${MISSING:+alt}", ""),
    ("$$A", "$A"), ("${MISSING:-${A}}", "1"),
])
def test_interpolation(text, expected):
    assert interpolate(text, {"A": "1", "EMPTY": ""}) == expected


def test_required_variable_is_refused():
    with pytest.raises(TaskFormatError, match="required variable X is not set: need it"):
        interpolate("${X:?need it}", {})


@pytest.mark.parametrize(("value", "seconds"), [("10s", 10), ("1m30s", 90), ("500ms", 0.5),
                                                 (7, 7), ("1h", 3600)])
def test_durations(value, seconds):
    assert parse_duration(value, "x") == seconds


@pytest.mark.parametrize(("value", "mb"), [("512m", 512), ("1g", 1024), ("1.5GB", 1536),
                                           (1048576, 1), ("256M", 256), ("2gi", 2048)])
def test_sizes(value, mb):
    assert parse_memory_mb(value, "x") == mb


@pytest.mark.parametrize(("service", "field", "words"), [
    ("privileged: true", "services.db.privileged", "privileged containers are not run"),
    ("cap_add: [NET_ADMIN]", "services.db.cap_add", "beyond the trial pod's policy: NET_ADMIN"),
    ("pid: host", "services.db.pid", "PID namespace"),
    ("devices: ['/dev/kvm:/dev/kvm']", "services.db.devices", "host devices"),
    ("network_mode: host", "services.db.network_mode", "share the trial pod's network"),
    ("volumes: ['/srv/data:/data']", "services.db.volumes[0]", "no host directory"),
    ("depends_on: [nowhere]", "services.db.depends_on", "undefined service 'nowhere'"),
    ("depends_on: {main: {condition: service_started}}", "services.db.depends_on",
     "cannot depend on 'main'"),
    ("sysctls: {net.core.somaxconn: 1024}", "services.db.sysctls", "sysctls"),
    ("frobnicate: 1", "services.db.frobnicate", "not supported"),
])
def test_refusals_name_file_service_and_reason(service, field, words):
    compose = f"services:\n  main: {{image: x}}\n  db:\n    image: d\n    {service}\n"
    [reason] = _reasons(compose)
    assert reason.startswith(f"environment/docker-compose.yaml: {field}: "), reason
    assert words in reason


def test_cap_add_within_the_pod_policy_is_allowed():
    compose = "services:\n  main: {image: x}\n  db: {image: d, cap_add: [CAP_CHOWN, SETUID]}\n"
    assert _reasons(compose) == []


def test_a_refused_service_is_not_named_again_as_missing_by_those_that_depend_on_it():
    """o11y-bench's stack service binds a task file; main depends on it being healthy: one
    error (the bind mount), not a second saying the stack is undefined."""
    compose = ("services:\n  main: {image: x, depends_on: {stack: {condition: "
               "service_healthy}}}\n"
               "  stack: {image: s, volumes: ['/srv/setup.json:/task/setup.json:ro'],"
               " healthcheck: {test: ['CMD', 'true']}}\n")
    [reason] = _reasons(compose)
    assert "services.stack.volumes[0]" in reason and "no host directory" in reason
    assert "undefined" not in reason
    main_refused = ("services:\n  main: {image: x, volumes: ['/var/run/docker.sock:/s']}\n"
                    "  db: {image: d}\n")
    [reason] = _reasons(main_refused, **{"environment/Dockerfile": None})
    assert "services.main.volumes[0]" in reason and "'main' is missing" not in reason


def test_two_services_on_one_port_are_refused():
    compose = ("services:\n  main: {image: x, expose: [8080]}\n"
               "  db: {image: d, ports: ['127.0.0.1:9000:8080/tcp']}\n")
    [reason] = _reasons(compose)
    assert "port 8080 is used by services 'main' and 'db'" in reason


@pytest.mark.parametrize("name", ["secrets", "probe", "agent-x"])
def test_a_service_named_like_a_reserved_container_is_refused(name):
    [reason] = _reasons(f"services:\n  main: {{image: x}}\n  {name}: {{image: d}}\n")
    assert f"services.{name}: the name '{name}' is reserved" in reason


def test_service_names_must_be_container_names():
    [reason] = _reasons("services:\n  main: {image: x}\n  My_DB: {image: d}\n")
    assert "services.My_DB: a service name must be a DNS label" in reason


def test_healthy_condition_needs_a_healthcheck_and_cycles_are_refused():
    compose = """\
services:
  main: {image: x, depends_on: {a: {condition: service_healthy}}}
  a: {image: a, depends_on: [b]}
  b: {image: b, depends_on: [a]}
"""
    reasons = _reasons(compose)
    assert any("'a' has no healthcheck test" in r for r in reasons), reasons
    compose = compose.replace("condition: service_healthy", "condition: service_started")
    assert any("depends_on cycle" in r for r in _reasons(compose))


def test_missing_main_build_context_and_verifier_compose_are_refused():
    reasons = _reasons("services:\n  db: {build: ../../outside}\n"
                       "  cache: {build: /srv/cache}\n  web: {build: '${CONTEXT_DIR}/../../etc'}\n",
                       **{"tests/docker-compose.yaml": "services: {}\n"})
    text = "\n".join(reasons)
    assert "tests/docker-compose.yaml: a separate verifier's docker-compose" in text
    assert "build context '../../outside' is outside the task's directory" in text
    assert "build context '/srv/cache' is outside the task's directory" in text
    assert "build context '/harbor/environment/../../etc' is outside the task's" in text
    assert "the agent's service 'main' is missing" not in text  # environment/Dockerfile is


def test_missing_main_is_the_dockerfile_or_docker_image_as_in_harbors_base_file():
    sidecars_only = "services:\n  helper: {image: python:3.12-slim, command: [sleep, infinity]}\n"
    env = load_compose(_task(sidecars_only))  # environment/Dockerfile is main
    assert env is not None and env.main is None and [s.name for s in env.sidecars] == ["helper"]
    files = {k: v.encode() for k, v in BASE.items() if k != "environment/Dockerfile"}
    files["environment/docker-compose.yaml"] = sidecars_only.encode()
    [reason] = [str(e) for e in compose_refusals(load_task_files(files, name="shop"))]
    assert "the agent's service 'main' is missing, and there is no environment/Dockerfile" in reason
    files["task.toml"] = files["task.toml"].replace(
        b"[environment]\n", b'[environment]\ndocker_image = "ubuntu:24.04"\n')
    assert compose_refusals(load_task_files(files, name="shop")) == []


def test_build_with_another_dockerfile_and_missing_dockerfile():
    compose = ("services:\n  main: {image: x}\n"
               "  db: {build: {context: db, dockerfile: Other}}\n")
    [reason] = _reasons(compose)
    assert "environment/db/Other not found" in reason
    env = load_compose(_task(compose, **{"environment/db/Other": "FROM x\n"}))
    assert env is not None and env.service("db").build == ServiceBuild("environment/db/",
                                                                       "Other")


def test_a_build_may_take_the_task_directory_as_its_context_as_under_harbor():
    """Harbor's CONTEXT_DIR is environment/'s absolute path: `${CONTEXT_DIR}/..` is the task's
    directory (to COPY files beside environment/), and a dockerfile under ${CONTEXT_DIR} is
    absolute, not relative to that context."""
    compose = ("services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n"
               "      dockerfile: ${CONTEXT_DIR}/Dockerfile\n"
               "  db: {build: {context: .., dockerfile: environment/db/Dockerfile}}\n"
               "  web: {build: '${CONTEXT_DIR}/db'}\n")
    env = load_compose(_task(compose, **{"app/data.txt": "x\n"}))
    assert env is not None
    assert env.service("main").build == ServiceBuild("", "environment/Dockerfile")
    assert env.service("db").build == ServiceBuild("", "environment/db/Dockerfile")
    assert env.service("web").build == ServiceBuild("environment/db/", "Dockerfile")
    outside = ("services:\n  main:\n    build: {context: db, "
               "dockerfile: '${CONTEXT_DIR}/Dockerfile'}\n")
    [reason] = _reasons(outside)
    assert "the Dockerfile environment/Dockerfile is outside the build context " \
           "environment/db/" in reason


def test_log_variables_stand_for_the_trial_log_volumes():
    assert HOST_LOGS_ROOT.startswith("/")
    env = load_compose(_task("services:\n  main: {image: x}\n  db:\n    image: d\n"
                             "    volumes: ['${HOST_ARTIFACTS_PATH}:/out']\n"))
    assert env is not None
    assert env.service("db").volumes == (VolumeMount("logs", "artifacts", "/out"),)


def test_profiles_services_are_not_started_and_yaml_errors_are_located():
    env = load_compose(_task("services:\n  main: {image: x}\n  dbg: {image: d, profiles: [x]}\n"))
    assert env is not None and [s.name for s in env.services] == ["main"]
    [reason] = _reasons("services: [\n")
    assert reason.startswith("environment/docker-compose.yaml: not valid YAML")


def test_sidecar_evidence_needs_its_service_and_a_hook_no_user():
    toml = BASE["task.toml"].replace(
        "[environment]", 'artifacts = ["/app/out", {source = "/tmp/dump.sql", service = "db"}]\n'
        '[[verifier.collect]]\ncommand = "dump > /tmp/dump.sql"\nservice = "db"\n'
        "[environment]")
    compose = "services:\n  main: {image: x}\n  db: {image: d}\n"
    reasons = [str(e) for e in compose_refusals(_task(None, **{"task.toml": toml}))]
    assert reasons == [
        "task.toml: artifacts: the artifact '/tmp/dump.sql' is collected from service 'db', "
        "which environment/docker-compose.yaml does not define",
        "task.toml: verifier.collect: service 'db' is not defined in "
        "environment/docker-compose.yaml",
    ]
    assert compose_refusals(_task(compose, **{"task.toml": toml})) == []  # a shared verifier
    separate = toml.replace("[environment]", '[verifier]\nenvironment_mode = "separate"\n'
                            "[environment]", 1)
    assert compose_refusals(_task(compose, **{"task.toml": separate})) == []
    as_user = separate.replace('service = "db"\n', 'service = "db"\nuser = "postgres"\n')
    [user] = [str(e) for e in compose_refusals(_task(compose, **{"task.toml": as_user}))]
    assert "runs as that container's user: drop 'user'" in user


def test_a_sidecar_naming_its_own_networks_is_refused_unless_the_network_is_public():
    compose = ("services:\n  helper:\n    image: python:3.12-slim\n"
               "    networks: [default]\n")
    files = {k: v.encode() for k, v in BASE.items()}
    files["environment/docker-compose.yaml"] = compose.encode()
    files["task.toml"] = files["task.toml"].replace(
        b"[environment]\n", b'[environment]\nnetwork_mode = "no-network"\n')
    [reason] = [str(e) for e in compose_refusals(load_task_files(files, name="shop"))]
    assert "services.helper.networks" in reason and "'no-network'" in reason, reason
    files["task.toml"] = files["task.toml"].replace(b'"no-network"', b'"public"')
    assert compose_refusals(load_task_files(files, name="shop")) == []


def test_main_without_a_network_is_the_trials_no_network_baseline():
    """`network_mode: none` on main keeps Harbor's agent container (and so its shared verifier)
    offline: one trial pod has one network, so the task's baseline becomes no-network."""
    offline = "services:\n  main:\n    build: .\n    network_mode: none\n"
    task = _task(offline)
    assert task.config.environment.network_mode == "no-network"
    assert compose_refusals(task) == []
    assert _task(FULL).config.environment.network_mode == "public"
    sidecar = "services:\n  main: {build: .}\n  db: {image: d, network_mode: none}\n"
    [reason] = _reasons(sidecar)
    assert "services.db.network_mode: network_mode 'none'" in reason
    allowlist = BASE["task.toml"].replace(
        "[environment]\n", '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["x.org"]\n')
    with pytest.raises(TaskFormatError, match="network_mode 'none' on main contradicts"):
        _task(offline, **{"task.toml": allowlist})


@pytest.mark.parametrize(("volume", "words"), [
    ("'../../etc:/etc2'", "is outside the task's directory"),
    ("'./big:/big'", "more than the 716,800 a bind of task files can hold"),
    ("'~/x:/x'", "no host directory"),
    ("'./many:/many'", "1,001 task files, more than the 1,000"),
])
def test_binds_of_task_files_stay_in_the_task_and_within_a_configmap(volume, words):
    compose = f"services:\n  main: {{image: x}}\n  db:\n    image: d\n    volumes: [{volume}]\n"
    many = {f"environment/many/{i}": "" for i in range(1001)} if "many" in volume else {}
    [reason] = _reasons(compose, **{"environment/big/a": "x" * 400_000,
                                    "environment/big/b": "y" * 400_000}, **many)
    assert "services.db.volumes[0]" in reason and words in reason, reason


@pytest.mark.parametrize("target", ["/shipyard", "/shipyard/bin/runner", "/shipyard/state/",
                                    "/shipyard/../shipyard/bin"])
def test_no_task_volume_of_main_lands_on_the_runners_folder(target):
    """A bind of the task's files, a named volume or a tmpfs over /shipyard would put the
    task's program where the operator execs its runner, or hide the runner's state."""
    for volume in (f"'./seed:{target}'", f"'data:{target}'"):
        compose = (f"services:\n  main:\n    image: x\n    volumes: [{volume}]\n"
                   "volumes:\n  data: {}\n")
        [reason] = _reasons(compose, **{"environment/seed/a": "a"})
        assert "services.main.volumes[0]" in reason and "the trial runner's" in reason, reason
    sidecar = ("services:\n  main: {image: x}\n  db:\n    image: d\n"
               f"    volumes: ['./seed:{target}']\n")
    assert _reasons(sidecar, **{"environment/seed/a": "a"}) == []  # its own filesystem


def test_no_volume_is_mounted_at_the_root():
    for service in ("main", "db"):
        compose = (f"services:\n  main: {{image: x}}\n  {service}:\n    image: d\n"
                   "    volumes: ['./seed:/']\n").replace("  main: {image: x}\n  main:", "  main:")
        [reason] = _reasons(compose, **{"environment/seed/a": "a"})
        assert f"services.{service}.volumes[0]" in reason and "at '/'" in reason, reason
