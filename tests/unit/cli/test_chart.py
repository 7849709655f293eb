"""The Helm chart's static contract: its CRDs are the generated ones, its values are schema-checked,
and the operator image pins every runtime dependency."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from shipyard.api.crds import all_crds, render

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "shipyard"


def test_chart_crds_are_identical_to_crds_dir() -> None:
    chart = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    top = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    assert chart.keys() == top.keys()
    stale = [name for name in top if chart[name] != top[name]]
    assert not stale, (
        f"charts/shipyard/crds/ differs from crds/ in {stale}; regenerate both with "
        "`python -m shipyard.api.crds crds && python -m shipyard.api.crds charts/shipyard/crds`"
    )


def test_chart_crds_are_current_with_the_models() -> None:
    for name, crd in all_crds().items():
        assert (CHART / "crds" / name).read_text() == render(crd), (
            f"charts/shipyard/crds/{name} is stale: `python -m shipyard.api.crds "
            "charts/shipyard/crds`"
        )


def test_values_are_covered_by_the_schema() -> None:
    """Every top-level value has a schema entry (the schema refuses unknown keys)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert set(values) <= set(schema["properties"]), set(values) - set(schema["properties"])
    for key, value in values.items():
        sub = schema["properties"][key]
        if isinstance(value, dict) and sub.get("additionalProperties") is False:
            assert set(value) <= set(sub["properties"]), (key, set(value) - set(sub["properties"]))


def test_chart_version_follows_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


def test_operator_image_pins_every_runtime_dependency() -> None:
    pins = {
        line.split("==")[0].lower()
        for line in (ROOT / "hack" / "operator-image" / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        if "python_version < '3.11'" in requirement:
            continue
        name = Requirement(requirement).name
        assert name.lower().replace("_", "-") in pins, (
            f"{name} is not pinned in hack/operator-image/constraints.txt; run "
            "`.venv/bin/python hack/localcluster/operator_image.py lock`"
        )
    assert "google-re2" in pins  # pathspec[re2]'s: an extra's dependencies are pinned too


DASHBOARD = CHART / "dashboards" / "shipyard.json"
DASHBOARD_TOPICS = ("phase", "throughput", "failure", "p50", "p95", "queue", "build", "cpu",
                    "memory")


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the chart's Grafana dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def test_the_grafana_dashboard_is_a_well_formed_dashboard() -> None:
    """Grafana's dashboard JSON model (schemaVersion 39): panels with unique ids, a grid
    position, a Prometheus query each, through the dashboard's own variables only."""
    import re

    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["type"] in ("timeseries", "barchart", "stat", "table", "bargauge")
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            used = set(re.findall(r"\$(\w+)", target["expr"]))
            assert used <= variables, (panel["title"], used - variables)
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    assert all(topic in titles for topic in DASHBOARD_TOPICS), titles
    series = " ".join(expr for _, expr in dashboard_queries())
    for name in ("shipyard_trials", "shipyard_trial_outcomes_total",
                 "shipyard_trial_phase_duration_seconds_bucket", "shipyard_sweep_queued_trials",
                 "shipyard_image_builds_total", "process_cpu_seconds_total",
                 "process_resident_memory_bytes"):
        assert name in series


def grafana_validator():
    """A validator of Grafana's own dashboard schema (`@grafana/schema`'s Dashboard type as a
    JSON Schema, cached by hack/grafana_schema.py, which hack/test.sh runs first)."""
    import sys

    import jsonschema

    sys.path.insert(0, str(ROOT / "hack"))
    try:
        import grafana_schema
    finally:
        sys.path.remove(str(ROOT / "hack"))
    schema = json.loads(grafana_schema.ensure().read_text())
    return jsonschema.Draft7Validator(schema)


def test_the_grafana_dashboard_validates_against_grafanas_dashboard_schema() -> None:
    validator = grafana_validator()
    dashboard = json.loads(DASHBOARD.read_text())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(dashboard)]
    assert not errors, errors
    # The schema is strict enough to catch what Grafana would not load.
    broken = json.loads(DASHBOARD.read_text())
    broken["panels"][0]["gridPos"] = {"h": "tall", "w": 12, "x": 0, "y": 0}
    broken["panels"][1].pop("type")
    broken["templating"]["list"][1]["refresh"] = 7
    broken["graphTooltip"] = "shared"
    found = {"/".join(map(str, e.absolute_path)) for e in validator.iter_errors(broken)}
    assert found == {"panels/0", "panels/1", "templating/list/1/refresh", "graphTooltip"}


def test_the_chart_ships_the_dashboard_and_kube_state_metrics_config() -> None:
    config = yaml.safe_load((CHART / "dashboards" / "kube-state-metrics.yaml").read_text())
    kinds = {r["groupVersionKind"]["kind"] for r in config["spec"]["resources"]}
    assert config["kind"] == "CustomResourceStateMetrics" and kinds == {"Trial", "Sweep"}
    template = (CHART / "templates" / "metrics.yaml").read_text()
    assert 'Files.Get "dashboards/shipyard.json"' in template
    assert "kind: ServiceMonitor" in template
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["metrics"]["serviceMonitor"]["enabled"] is False  # off by default
