"""task.toml fields, defaults, legacy conversions and validators (docs/harbor.md §a.2, a.3)."""

from __future__ import annotations

import json

import pytest

from shipyard.taskformat import task_config_json

from .helpers import config, config_error


def toml_string(text: str) -> str:
    """A TOML basic string (JSON escapes are TOML escapes; DEL must be escaped too)."""
    return json.dumps(text).replace("\x7f", "\\u007f")


def test_empty_file_gets_harbor_defaults() -> None:
    c = config()
    assert c.schema_version == "1.4"
    assert c.task is None and c.source is None and c.steps is None
    assert c.metadata == {} and c.artifacts == []
    assert c.multi_step_reward_strategy is None and c.reward_strategy is None
    assert (c.agent.timeout_sec, c.agent.user, c.agent.network_mode, c.agent.allowed_hosts) == (
        None,
        None,
        None,
        None,
    )
    v = c.verifier
    assert (v.timeout_sec, v.env, v.user, v.environment_mode, v.environment, v.collect) == (
        600.0,
        {},
        None,
        None,
        None,
        [],
    )
    e = c.environment
    assert (e.network_mode, e.allowed_hosts, e.build_timeout_sec, e.os) == (
        "public",
        None,
        600.0,
        "linux",
    )
    assert (e.docker_image, e.cpus, e.memory_mb, e.storage_mb, e.gpus, e.gpu_types, e.tpu) == (
        (None,) * 7
    )
    assert (e.mcp_servers, e.env, e.skills_dir, e.healthcheck, e.workdir) == (
        [],
        {},
        None,
        None,
        None,
    )
    assert c.solution.env == {}


def test_unknown_keys_are_ignored() -> None:
    c = config(
        """
        colour = "blue"
        [agent]
        timeout_secs = 5
        [environment.extra]
        x = 1
        """
    )
    assert c.agent.timeout_sec is None
    assert "colour" not in task_config_json(c)


def test_schema_version_is_any_string_and_version_is_its_legacy_name() -> None:
    assert config('schema_version = "banana"').schema_version == "banana"
    assert config('version = "1.0"').schema_version == "1.0"
    assert config('version = "1.0"\nschema_version = "1.3"').schema_version == "1.3"


class TestPackageInfo:
    def test_fields_and_defaults(self) -> None:
        c = config(
            """
            [task]
            name = "acme/hello-world_2.x"
            authors = [{ name = "Ada" }, { name = "Bob", email = "bob@example.com" }]
            keywords = ["k"]
            """
        )
        assert c.task is not None
        assert c.task.short_name == "hello-world_2.x"
        assert (c.task.version, c.task.description) == (None, "")
        assert [(a.name, a.email) for a in c.task.authors] == [
            ("Ada", None),
            ("Bob", "bob@example.com"),
        ]

    @pytest.mark.parametrize(
        "name", ["hello", "acme/", "/x", ".acme/x", "acme/.x", "a/b/c", "acme/x..y", "a b/c"]
    )
    def test_bad_names(self, name: str) -> None:
        error = config_error(f'[task]\nname = "{name}"')
        assert error.field == "task.name"
        assert error.reason == (
            "Package name must be in 'org/name' format with alphanumeric characters, hyphens, "
            f"underscores, and dots. Cannot start with a dot or contain '..'. Got: {name}"
        )

    def test_name_is_required_and_version_non_empty(self) -> None:
        assert config_error('[task]\ndescription = "x"').field == "task.name"
        error = config_error('[task]\nname = "a/b"\nversion = ""')
        assert error.field == "task.version"
        assert "at least 1 character" in error.reason


class TestAgentAndVerifier:
    def test_user_is_name_or_uid(self) -> None:
        c = config('[agent]\nuser = "agent"\n[verifier]\nuser = 1000')
        assert (c.agent.user, c.verifier.user) == ("agent", 1000)

    def test_bad_user_is_one_error(self) -> None:
        error = config_error("[agent]\nuser = [1]")
        assert len(error.errors) == 1
        assert (error.field, error.reason) == (
            "agent.user",
            "Input should be a valid string or integer",
        )

    def test_timeouts_are_floats(self) -> None:
        c = config("[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30")
        assert task_config_json(c)["agent"]["timeout_sec"] == 60.0
        assert isinstance(c.verifier.timeout_sec, float)

    def test_shared_mode_with_verifier_environment_is_rejected(self) -> None:
        error = config_error(
            """
            [verifier]
            environment_mode = "shared"
            [verifier.environment]
            docker_image = "grader"
            """
        )
        assert error.field == "verifier.environment_mode"
        assert error.reason == (
            "[verifier].environment_mode='shared' is incompatible with [verifier.environment]; "
            "either omit the environment or set environment_mode='separate'."
        )

    def test_environment_mode_values(self) -> None:
        assert config('[verifier]\nenvironment_mode = "separate"').verifier.environment_mode == (
            "separate"
        )
        assert config_error('[verifier]\nenvironment_mode = "both"').field == (
            "verifier.environment_mode"
        )

    def test_collect_hooks(self) -> None:
        c = config(
            """
            [[verifier.collect]]
            command = "pg_dump > /tmp/d.sql"
            service = " postgres "
            [[verifier.collect]]
            command = "true"
            """
        )
        first, second = c.verifier.collect
        assert (first.service, first.timeout_sec, first.user) == ("postgres", 60.0, None)
        assert second.service == "main"

    def test_collect_service_rules(self) -> None:
        error = config_error('[[verifier.collect]]\ncommand = "x"\nservice = "  "')
        assert (error.field, error.reason) == (
            "verifier.collect[0].service",
            "Collect hook service must not be empty.",
        )
        error = config_error('[[verifier.collect]]\ncommand = "x"\nservice = "-db"')
        assert error.reason == (
            "Invalid Docker Compose service name: '-db'. Service names must start with an "
            "alphanumeric character and contain only alphanumeric characters, hyphens, "
            "underscores, and dots."
        )
        assert config_error("[[verifier.collect]]\nservice = 'db'").field == (
            "verifier.collect[0].command"
        )


class TestEnvironment:
    def test_os_is_case_insensitive(self) -> None:
        assert config('[environment]\nos = "Windows"').environment.os == "windows"
        assert config_error('[environment]\nos = "macos"').field == "environment.os"

    @pytest.mark.parametrize(("raw", "value"), [("2", 2), ("2.0", 2), ("1.5", 1.5), ("true", 1)])
    def test_cpus(self, raw: str, value: float) -> None:
        cpus = config(f"[environment]\ncpus = {raw}").environment.cpus
        assert cpus == value and type(cpus) is type(value)

    @pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
    def test_cpus_must_be_finite(self, raw: str) -> None:
        error = config_error(f"[environment]\ncpus = {raw}")
        assert error.field == "environment.cpus"
        assert error.reason == f"cpus must be a finite number; got {float(raw)}."

    def test_cpus_type_error_is_one_error(self) -> None:
        error = config_error('[environment]\ncpus = "many"')
        assert (len(error.errors), error.reason) == (1, "Input should be a valid number")

    def test_resources(self) -> None:
        e = config(
            """
            [environment]
            memory_mb = 2048
            storage_mb = 10240
            gpus = 1
            gpu_types = ["H100", "A100"]
            """
        ).environment
        assert (e.memory_mb, e.storage_mb, e.gpus, e.gpu_types) == (
            2048,
            10240,
            1,
            ["H100", "A100"],
        )

    @pytest.mark.parametrize(
        ("legacy", "mb"), [("2G", 2048), ("512M", 512), ("1024k", 1), ("1.5g", 1536), (" 3m ", 3)]
    )
    def test_legacy_memory_and_storage(self, legacy: str, mb: int) -> None:
        e = config(f'[environment]\nmemory = "{legacy}"\nstorage = "{legacy}"').environment
        assert (e.memory_mb, e.storage_mb) == (mb, mb)
        assert (
            "memory"
            not in task_config_json(config(f'[environment]\nmemory = "{legacy}"'))["environment"]
        )

    def test_legacy_size_agreeing_with_explicit_value(self) -> None:
        assert (
            config('[environment]\nmemory = "1G"\nmemory_mb = 1024').environment.memory_mb == 1024
        )

    def test_legacy_size_conflict(self) -> None:
        error = config_error('[environment]\nmemory = "1G"\nmemory_mb = 2000')
        assert error.field == "environment.memory"
        assert error.reason == (
            "Conflicting 'memory' and 'memory_mb' values: memory='1G' (1024 MB) != memory_mb=2000."
        )
        error = config_error('[environment]\nstorage = "1M"\nstorage_mb = 2')
        assert error.reason == (
            "Conflicting 'storage' and 'storage_mb' values: storage='1M' (1 MB) != storage_mb=2."
        )

    def test_legacy_size_format_error(self) -> None:
        error = config_error('[environment]\nstorage = "10 GB"')
        assert error.field == "environment.storage"
        assert error.reason == "Invalid size format: 10 GB. Expected format like '1G', '512M', etc."

    def test_legacy_size_that_is_not_a_string_is_dropped(self) -> None:
        assert config("[environment]\nmemory = 2048").environment.memory_mb is None

    def test_tpu(self) -> None:
        tpu = config('[environment.tpu]\ntype = "v6e"\ntopology = " 2x4 "').environment.tpu
        assert tpu is not None
        assert (tpu.type, tpu.topology, tpu.chip_count) == ("v6e", "2x4", 8)
        assert (
            config('[environment.tpu]\ntype = "v5p"\ntopology = "2x2x1"').environment.tpu.chip_count
            == 4
        )  # type: ignore[union-attr]

    @pytest.mark.parametrize("topology", ["4", "0x4", "2x", "2X4", "2x4x", "x2", "2*4", "-2x4"])
    def test_bad_tpu_topology(self, topology: str) -> None:
        error = config_error(f'[environment.tpu]\ntype = "v6e"\ntopology = "{topology}"')
        assert error.field == "environment.tpu.topology"
        assert error.reason == (
            f"Invalid TPU topology '{topology}': expected dimensions separated by 'x' with each "
            "dimension a positive integer (e.g., '2x4', '2x2x1', '4x4')."
        )

    def test_tpu_type_required_non_empty(self) -> None:
        assert config_error('[environment.tpu]\ntype = ""\ntopology = "2x2"').field == (
            "environment.tpu.type"
        )
        assert config_error('[environment.tpu]\ntopology = "2x2"').field == "environment.tpu.type"

    def test_healthcheck_defaults(self) -> None:
        h = config('[environment.healthcheck]\ncommand = "test -f /ready"').environment.healthcheck
        assert h is not None
        assert (h.interval_sec, h.timeout_sec, h.start_period_sec, h.start_interval_sec) == (
            5.0,
            30.0,
            0.0,
            5.0,
        )
        assert h.retries == 3
        assert config_error("[environment.healthcheck]\nretries = 1").field == (
            "environment.healthcheck.command"
        )

    def test_env_values_are_kept_as_templates(self) -> None:
        e = config('[environment.env]\nKEY = "${KEY}"\nX = "${X:-1}"').environment
        assert e.env == {"KEY": "${KEY}", "X": "${X:-1}"}

    @pytest.mark.parametrize(
        ("section", "mode"),
        [("environment", "no-network"), ("environment", "public")],
    )
    def test_legacy_allow_internet(self, section: str, mode: str) -> None:
        allow = "true" if mode == "public" else "false"
        c = config(f"[{section}]\nallow_internet = {allow}")
        assert c.environment.network_mode == mode
        assert c.environment.allow_internet is None
        assert "allow_internet" not in task_config_json(c)["environment"]

    def test_allow_internet_applies_to_verifier_and_step_environments(self) -> None:
        c = config(
            """
            [verifier.environment]
            allow_internet = false
            [[steps]]
            name = "a"
            [steps.verifier.environment]
            allow_internet = false
            """
        )
        assert c.verifier.environment is not None
        assert c.verifier.environment.network_mode == "no-network"
        assert c.steps is not None and c.steps[0].verifier.environment is not None
        assert c.steps[0].verifier.environment.network_mode == "no-network"

    def test_allow_internet_loses_to_explicit_network_fields(self) -> None:
        c = config('[environment]\nallow_internet = false\nnetwork_mode = "public"')
        assert c.environment.network_mode == "public"
        c = config(
            '[environment]\nallow_internet = true\nnetwork_mode = "allowlist"\nallowed_hosts = []'
        )
        assert c.environment.network_mode == "allowlist"


class TestNetworkFields:
    def test_allowlist_is_normalized(self) -> None:
        c = config(
            """
            [environment]
            network_mode = "allowlist"
            allowed_hosts = ["Example.COM.", "*.github.com", "10.0.0.0/8", "2001:DB8::1",
                             "192.0.2.1", "2001:db8::/32"]
            """
        )
        assert c.environment.allowed_hosts == [
            "example.com",
            "*.github.com",
            "10.0.0.0/8",
            "2001:db8::1",
            "192.0.2.1",
            "2001:db8::/32",
        ]

    def test_empty_allowlist_is_deny_all(self) -> None:
        c = config('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = []')
        assert c.environment.allowed_hosts == []

    @pytest.mark.parametrize(
        "toml",
        [
            '[environment]\nallowed_hosts = ["a.com"]',
            '[environment]\nnetwork_mode = "no-network"\nallowed_hosts = ["a.com"]',
            '[agent]\nallowed_hosts = ["a.com"]',
            "[agent]\nallowed_hosts = []",
            '[verifier]\nnetwork_mode = "public"\nallowed_hosts = ["a.com"]',
        ],
    )
    def test_hosts_only_with_allowlist(self, toml: str) -> None:
        error = config_error(toml)
        assert error.field == toml.split("]")[0][1:] + ".allowed_hosts"
        assert error.reason == "allowed_hosts is only valid when network_mode='allowlist'."

    def test_empty_hosts_with_public_baseline_is_fine(self) -> None:
        assert config("[environment]\nallowed_hosts = []").environment.allowed_hosts == []

    def test_phase_overrides(self) -> None:
        c = config(
            """
            [agent]
            network_mode = "allowlist"
            allowed_hosts = ["PyPI.org"]
            [verifier]
            network_mode = "no-network"
            """
        )
        assert c.agent.allowed_hosts == ["pypi.org"]
        assert c.verifier.network_mode == "no-network"

    def test_bad_entry_names_the_field(self) -> None:
        error = config_error(
            '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["https://x.com"]'
        )
        assert (error.file, error.field) == ("task.toml", "environment.allowed_hosts")
        assert str(error) == (
            "task.toml: environment.allowed_hosts: allowed_hosts entries must be hostnames, IP "
            "addresses, or IP CIDR ranges, not URLs, ports, or paths."
        )

    def test_bad_mode(self) -> None:
        error = config_error('[environment]\nnetwork_mode = "internet"')
        assert error.field == "environment.network_mode"
        assert "'no-network', 'public' or 'allowlist'" in error.reason


class TestMcpServers:
    def test_defaults_and_http_alias(self) -> None:
        c = config(
            """
            [[environment.mcp_servers]]
            name = "a"
            url = "http://a:8000/sse"
            [[environment.mcp_servers]]
            name = "b"
            transport = "http"
            url = "http://b:8000/mcp"
            [[environment.mcp_servers]]
            name = "c"
            transport = "stdio"
            command = "npx"
            args = ["-y", "server"]
            """
        )
        a, b, s = c.environment.mcp_servers
        assert (a.transport, a.args, a.headers) == ("sse", [], {})
        assert b.transport == "streamable-http"
        assert (s.command, s.args) == ("npx", ["-y", "server"])

    @pytest.mark.parametrize(
        ("body", "field", "reason"),
        [
            ('transport = "sse"', "url", "'url' is required for transport 'sse'"),
            ('transport = "http"', "url", "'url' is required for transport 'streamable-http'"),
            ('transport = "stdio"', "command", "'command' is required for transport 'stdio'"),
            (
                'transport = "stdio"\ncommand = "x"\nheaders = { A = "b" }',
                "headers",
                "'headers' is only supported for HTTP MCP transports",
            ),
        ],
    )
    def test_transport_requirements(self, body: str, field: str, reason: str) -> None:
        error = config_error(f'[[environment.mcp_servers]]\nname = "m"\n{body}')
        assert (error.field, error.reason) == (f"environment.mcp_servers[0].{field}", reason)

    def test_transport_values(self) -> None:
        error = config_error('[[environment.mcp_servers]]\nname = "m"\ntransport = "ws"')
        assert error.field == "environment.mcp_servers[0].transport"

    def _headers(self, headers: str) -> str:
        return f'[[environment.mcp_servers]]\nname = "m"\nurl = "http://m"\nheaders = {headers}'

    @pytest.mark.parametrize(
        "headers",
        [
            '{ Authorization = "Bearer ${TOKEN}" }',
            '{ X-Api-Key = "${API_KEY}" }',
            '{ Cookie = "${COOKIE}" }',
            '{ X-Trace = "plain value" }',
            '{ "Set-Cookie" = "${C}" }',
        ],
    )
    def test_valid_headers(self, headers: str) -> None:
        assert config(self._headers(headers)).environment.mcp_servers[0].headers

    @pytest.mark.parametrize(
        ("headers", "name"),
        [
            ('{ Authorization = "Bearer sk-123" }', "Authorization"),
            ('{ Authorization = "Bearer ${TOKEN:-x}" }', "Authorization"),
            ('{ X-Api-Key = "${A}${B}" }', "X-Api-Key"),
            ('{ x-secret-thing = "s3cr3t" }', "x-secret-thing"),
            ('{ cookie = "a=b" }', "cookie"),
            ('{ X-Password = "Basic ${P} extra" }', "X-Password"),
            ('{ Proxy-Credential = "$TOKEN" }', "Proxy-Credential"),
        ],
    )
    def test_credential_headers_must_be_templates(self, headers: str, name: str) -> None:
        error = config_error(self._headers(headers))
        assert error.field == f"environment.mcp_servers[0].headers.{name}"
        assert error.reason == (
            f"MCP HTTP header '{name}' must reference credentials as ${{VAR}} without a "
            "default, such as 'Bearer ${TOKEN}'"
        )

    def test_header_name_and_value_syntax(self) -> None:
        error = config_error(self._headers('{ "Bad Name" = "x" }'))
        assert error.reason == "Invalid MCP HTTP header name 'Bad Name'"
        error = config_error(self._headers('{ X-A = "a\\r\\nInjected: 1" }'))
        assert error.reason == "MCP HTTP header 'X-A' value must not contain CR or LF characters"


class TestArtifacts:
    def test_string_and_table_forms(self) -> None:
        c = config(
            'artifacts = ["/app/out.txt", '
            '{ source = "/app/results", destination = "res", exclude = ["*.tmp"] }, '
            '{ source = "/tmp/d.sql", service = "db" }, { source = "/a", destination = "" }]'
        )
        assert task_config_json(c)["artifacts"] == [
            "/app/out.txt",
            {"source": "/app/results", "destination": "res", "exclude": ["*.tmp"], "service": None},
            {"source": "/tmp/d.sql", "destination": None, "exclude": [], "service": "db"},
            {"source": "/a", "destination": None, "exclude": [], "service": None},
        ]

    @pytest.mark.parametrize(
        ("entry", "field", "reason"),
        [
            (
                '"/app/../etc"',
                "artifacts[0]",
                "Artifact source must not contain '..' components, got: '/app/../etc'",
            ),
            (
                '{ source = "../x" }',
                "artifacts[0].source",
                "Artifact source must not contain '..' components, got: '../x'",
            ),
            (
                '{ source = "/a", destination = "a\\\\b" }',
                "artifacts[0].destination",
                "Artifact destination must use forward slashes as path separators, got: 'a\\\\b'",
            ),
            (
                '{ source = "/a", destination = "/abs" }',
                "artifacts[0].destination",
                "Artifact destination must be a relative path, got: '/abs'",
            ),
            (
                '{ source = "/a", destination = "." }',
                "artifacts[0].destination",
                "Artifact destination must name a file or directory, got: '.'",
            ),
            (
                '{ source = "/a", destination = "x/../../y" }',
                "artifacts[0].destination",
                "Artifact destination must not contain '..' components, got: 'x/../../y'",
            ),
            (
                '{ source = "/a", destination = "manifest.json/" }',
                "artifacts[0].destination",
                "Artifact destination 'manifest.json' is reserved for the collection manifest.",
            ),
            (
                '{ source = "data/x", service = "db" }',
                "artifacts[0].source",
                "Artifact source 'data/x' collected from service 'db' must be an absolute path.",
            ),
            (
                '{ source = "/x", service = "my db" }',
                "artifacts[0].service",
                "Invalid Docker Compose service name: 'my db'. Service names must start with an "
                "alphanumeric character and contain only alphanumeric characters, hyphens, "
                "underscores, and dots.",
            ),
        ],
    )
    def test_invalid_entries(self, entry: str, field: str, reason: str) -> None:
        error = config_error(f"artifacts = [{entry}]")
        assert (error.field, error.reason) == (field, reason)

    def test_sidecar_sources_may_be_windows_absolute_and_main_may_be_relative(self) -> None:
        c = config('artifacts = [{ source = "C:/logs/x", service = "db" }, "rel/path"]')
        assert len(c.artifacts) == 2
        assert config('artifacts = [{ source = "rel", service = "main" }]').artifacts

    def test_entry_of_wrong_type(self) -> None:
        error = config_error("artifacts = [5]")
        assert error.field == "artifacts[0]"
        assert len(error.errors) == 1


class TestSteps:
    def test_step_fields_and_defaults(self) -> None:
        c = config(
            """
            multi_step_reward_strategy = "final"
            [[steps]]
            name = "scaffold"
            min_reward = 1
            artifacts = ["/app/x"]
            [steps.agent]
            timeout_sec = 60
            user = "agent"
            [steps.verifier]
            env = { A = "1" }
            [steps.healthcheck]
            command = "true"
            [[steps]]
            name = "grade"
            min_reward = { correctness = 0.8, style = 0 }
            """
        )
        assert c.is_multi_step and c.reward_strategy == "final"
        assert c.steps is not None
        first, second = c.steps
        assert (first.min_reward, first.agent.timeout_sec, first.agent.user) == (1.0, 60.0, "agent")
        assert first.verifier.timeout_sec == 600.0
        assert first.healthcheck is not None and first.artifacts == ["/app/x"]
        assert second.min_reward == {"correctness": 0.8, "style": 0.0}
        assert c.step("grade") is second
        with pytest.raises(ValueError, match="Unknown step 'nope'"):
            c.step("nope")

    def test_mean_is_the_default_strategy(self) -> None:
        assert config('[[steps]]\nname = "a"').reward_strategy == "mean"
        assert config("steps = []").is_multi_step is False
        assert config_error('multi_step_reward_strategy = "max"').field == (
            "multi_step_reward_strategy"
        )

    def test_bad_min_reward(self) -> None:
        error = config_error('[[steps]]\nname = "a"\nmin_reward = "high"')
        assert error.field == "steps[0].min_reward"
        assert len(error.errors) == 1
        assert config_error('[[steps]]\nname = "a"\nmin_reward = { r = "x" }').field == (
            "steps[0].min_reward.r"
        )

    @pytest.mark.parametrize(
        "name",
        [
            "",
            ".",
            "..",
            "a/b",
            "a\\b",
            "trailing.",
            "trailing ",
            "a:b",
            "a*b",
            'a"b',
            "a<b",
            "a|b",
            "a?b",
            "tab\there",
            "nul\x00",
            "del\x7f",
            "CON",
            "con",
            "Con.txt",
            "NUL .md",
            "COM1",
            "lpt9",
            "COM¹",
            "x" * 256,
            "é" * 128,
        ],
    )
    def test_bad_step_names(self, name: str) -> None:
        error = config_error(f"[[steps]]\nname = {toml_string(name)}")
        assert error.field == "steps[0].name"
        assert error.reason.startswith(
            f"Invalid step name {name!r}: step names must be non-empty, portable directory names"
        )

    @pytest.mark.parametrize(
        "name", ["build", "step-1", "Step_2.final", "x" * 255, "é" * 127, "COM10", "CONSOLE", "ünï"]
    )
    def test_good_step_names(self, name: str) -> None:
        assert config(f'[[steps]]\nname = "{name}"').steps is not None

    @pytest.mark.parametrize(
        ("first", "second"),
        [("build", "build"), ("build", "BUILD"), ("e\u0301", "\u00e9"), ("Straße", "STRASSE")],
    )
    def test_step_names_are_unique_after_nfc_and_casefold(self, first: str, second: str) -> None:
        error = config_error(f'[[steps]]\nname = "{first}"\n[[steps]]\nname = "{second}"')
        assert error.field == "steps[1].name"
        assert error.reason == (
            "Step names must be unique, including case and Unicode normalization variants: "
            f"{second!r}"
        )


def test_several_errors_are_all_reported() -> None:
    error = config_error(
        """
        [agent]
        timeout_sec = "soon"
        [environment]
        os = "plan9"
        """
    )
    assert [e.field for e in error.errors] == ["agent.timeout_sec", "environment.os"]
    assert str(error).count("\n") == 1


def test_dump_matches_harbor_structure() -> None:
    dumped = task_config_json(config())
    assert list(dumped) == [
        "schema_version",
        "task",
        "metadata",
        "verifier",
        "agent",
        "environment",
        "solution",
        "source",
        "multi_step_reward_strategy",
        "steps",
        "artifacts",
    ]
    assert list(dumped["verifier"]) == [
        "network_mode",
        "allowed_hosts",
        "timeout_sec",
        "env",
        "user",
        "environment_mode",
        "environment",
        "collect",
    ]
    assert list(dumped["environment"]) == [
        "network_mode",
        "allowed_hosts",
        "build_timeout_sec",
        "docker_image",
        "os",
        "cpus",
        "memory_mb",
        "storage_mb",
        "gpus",
        "gpu_types",
        "tpu",
        "mcp_servers",
        "env",
        "skills_dir",
        "healthcheck",
        "workdir",
    ]
