"""`shipyard sweep report`: a sweep's results as one self-contained HTML page (no CDN: the
Vega, Vega-Lite and Vega-Embed runtime is inlined from the `vl-convert-python` package, so the
page renders offline and on an air-gapped cluster's bastion).

Pure: the JobResult and JobConfig that `shipyard sweep results` computes (`harbor_results`,
one computation of the numbers) in, HTML out. The leaderboard is a table; the heat map, the
cost and token bars, the phase-duration distributions and the failure reasons are Vega-Lite
charts whose marks link to each trial's directory in the exported job (`jobs_dir`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from shipyard.api.conventions import parse_time

TIMINGS = (("environment_setup", "environment"), ("agent_setup", "setup"),
           ("agent_execution", "agent"), ("verifier", "verifier"))


def runtime() -> str:
    """Vega-Embed, Vega-Lite and Vega as one script (they set `window.vegaEmbed`)."""
    try:
        import vl_convert
    except ImportError as exc:  # the `report` extra
        raise RuntimeError("shipyard sweep report needs the vl-convert-python package: "
                           "pip install 'shipyard[report]'") from exc
    return str(vl_convert.javascript_bundle())


def _seconds(timing: Mapping[str, Any] | None) -> float | None:
    if not timing:
        return None
    began, ended = parse_time(timing.get("started_at")), parse_time(timing.get("finished_at"))
    return (ended - began).total_seconds() if began and ended else None


def _reward(result: Mapping[str, Any]) -> float | None:
    rewards = (result.get("verifier_result") or {}).get("rewards")
    if not rewards:
        return None
    return float(rewards.get("reward", next(iter(rewards.values()))))


def _key(result: Mapping[str, Any]) -> str:
    agent = result["agent_info"]
    model = (agent.get("model_info") or {}).get("name")
    return f"{agent['name']}__{model}" if model else agent["name"]


def trial_link(job_name: str, trial: str, jobs_href: str) -> str:
    return f"{jobs_href.rstrip('/')}/{job_name}/{trial}/"


def chart_data(job: Mapping[str, Any], job_name: str, jobs_href: str
               ) -> dict[str, list[dict[str, Any]]]:
    """The rows each chart plots, from the trial results."""
    trials, cells, phases, failures = [], {}, [], {}
    for r in job["trial_results"]:
        link = trial_link(job_name, r["trial_name"], jobs_href)
        reward = _reward(r)
        exception = (r.get("exception_info") or {}).get("exception_type")
        trials.append({"trial": r["trial_name"], "task": r["task_name"], "agent": _key(r),
                       "reward": reward, "exception": exception or "", "link": link})
        cell = cells.setdefault((r["task_name"], _key(r)), {
            "task": r["task_name"], "agent": _key(r), "rewards": [], "link": link})
        cell["rewards"].append(reward or 0.0)
        for field, phase in TIMINGS:
            seconds = _seconds(r.get(field))
            if seconds is not None:
                phases.append({"phase": phase, "seconds": seconds, "trial": r["trial_name"],
                               "link": link})
        if exception:
            failures[(exception, _key(r))] = failures.get((exception, _key(r)), 0) + 1
    heat = [{"task": c["task"], "agent": c["agent"], "link": c["link"],
             "mean_reward": sum(c["rewards"]) / len(c["rewards"]), "trials": len(c["rewards"])}
            for c in cells.values()]
    usage = []
    for key, stats in job["stats"]["evals"].items():
        usage += [{"eval": key, "what": "cost (USD)", "value": stats.get("cost_usd") or 0},
                  {"eval": key, "what": "input tokens", "value": stats.get("n_input_tokens") or 0},
                  {"eval": key, "what": "output tokens",
                   "value": stats.get("n_output_tokens") or 0}]
    return {"trials": trials, "heat": heat, "phases": phases, "usage": usage,
            "failures": [{"exception": e, "agent": a, "count": n}
                         for (e, a), n in sorted(failures.items())]}


def charts(data: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Vega-Lite specs by element id."""
    tooltip_trial = [{"field": "trial"}, {"field": "link"}]
    specs = {
        "heatmap": {
            "title": "Mean reward per task and agent (click: the trial)",
            "data": {"values": data["heat"]}, "mark": {"type": "rect", "cursor": "pointer"},
            "width": {"step": 70}, "height": {"step": 26},
            "encoding": {
                "x": {"field": "agent", "type": "nominal", "title": "agent"},
                "y": {"field": "task", "type": "nominal", "title": "task"},
                "color": {"field": "mean_reward", "type": "quantitative",
                          "scale": {"domain": [0, 1], "scheme": "viridis"},
                          "title": "mean reward"},
                "href": {"field": "link"},
                "tooltip": [{"field": "task"}, {"field": "agent"},
                            {"field": "mean_reward", "format": ".3f"}, {"field": "trials"}]},
        },
        "usage": {
            "title": "Cost and tokens per eval key",
            "data": {"values": data["usage"]}, "mark": "bar",
            "encoding": {"x": {"field": "value", "type": "quantitative", "title": None},
                         "y": {"field": "eval", "type": "nominal", "title": None},
                         "row": {"field": "what", "type": "nominal", "title": None}},
            "resolve": {"scale": {"x": "independent"}},
        },
        "phases": {
            "title": "Phase durations (seconds; click a point: the trial)",
            "data": {"values": data["phases"]},
            "layer": [
                {"mark": {"type": "boxplot", "extent": "min-max", "opacity": 0.5},
                 "encoding": {"x": {"field": "seconds", "type": "quantitative"},
                              "y": {"field": "phase", "type": "nominal",
                                    "sort": [p for _, p in TIMINGS]}}},
                {"mark": {"type": "point", "cursor": "pointer"},
                 "encoding": {"x": {"field": "seconds", "type": "quantitative"},
                              "y": {"field": "phase", "type": "nominal",
                                    "sort": [p for _, p in TIMINGS]},
                              "href": {"field": "link"}, "tooltip": tooltip_trial}},
            ],
        },
        "failures": {
            "title": "Failure reasons (Harbor's exception types)",
            "data": {"values": data["failures"]}, "mark": "bar",
            "encoding": {"x": {"field": "count", "type": "quantitative", "title": "trials"},
                         "y": {"field": "exception", "type": "nominal", "title": None},
                         "color": {"field": "agent", "type": "nominal"}},
        },
    }
    # A chart with no data would only warn in the console: left out.
    sources = {"heatmap": "heat", "usage": "usage", "phases": "phases", "failures": "failures"}
    return {name: spec for name, spec in specs.items() if data[sources[name]]}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def leaderboard(job: Mapping[str, Any]) -> str:
    rows = []
    for key, stats in job["stats"]["evals"].items():
        metrics = ", ".join(f"{k} {_cell(v)}" for m in stats["metrics"] for k, v in m.items())
        passes = ", ".join(f"@{k} {_cell(v)}" for k, v in stats["pass_at_k"].items())
        rows.append(
            f"<tr><td class=key>{html.escape(key)}</td><td>{metrics or '-'}</td>"
            f"<td>{passes or '-'}</td><td>{stats['n_trials']}</td><td>{stats['n_errors']}</td>"
            f"<td>{_cell(stats.get('cost_usd'))}</td>"
            f"<td>{_cell(stats.get('n_input_tokens'))} / {_cell(stats.get('n_output_tokens'))}"
            "</td></tr>")
    return ("<table><thead><tr><th>eval key</th><th>metrics</th><th>pass@k</th>"
            "<th>with reward</th><th>errors</th><th>cost (USD)</th><th>tokens in / out</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def trial_table(trials: Sequence[Mapping[str, Any]]) -> str:
    rows = [f"<tr><td><a href=\"{html.escape(t['link'])}\">{html.escape(t['trial'])}</a></td>"
            f"<td>{html.escape(t['task'])}</td><td>{html.escape(t['agent'])}</td>"
            f"<td>{_cell(t['reward'])}</td><td>{html.escape(t['exception'])}</td></tr>"
            for t in trials]
    return ("<table><thead><tr><th>trial (its logs)</th><th>task</th><th>agent</th>"
            "<th>reward</th><th>exception</th></tr></thead><tbody>" + "".join(rows)
            + "</tbody></table>")


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
text-align:left;font-size:14px}th{background:#f3f3f3}.chart{margin:1.5em 0}
.key{font-family:monospace}.vega-embed{display:block!important}"""


def report_html(job: Mapping[str, Any], config: Mapping[str, Any], title: str,
                jobs_href: str, script: str) -> str:
    """The page: `script` is the inlined runtime (`runtime()`)."""
    job_name = str(config.get("job_name", ""))
    data = chart_data(job, job_name, jobs_href)
    specs = charts(data)
    stats = job["stats"]
    summary = (f"{stats['n_completed_trials']}/{job['n_total_trials']} trials finished, "
               f"{stats['n_errored_trials']} error(s); started {job.get('started_at')}, "
               f"finished {job.get('finished_at') or '-'}")
    divs = "".join(f'<div class=chart id="{name}"></div>' for name in specs)
    inlined = script.replace("</script", "<\\/script")
    embed = ("const specs = " + json.dumps(specs).replace("</", "<\\/") + ";\n"
             "for (const [id, spec] of Object.entries(specs)) {\n"
             "  vegaEmbed('#' + id, spec, {renderer: 'svg', actions: false})\n"
             "    .catch((e) => { document.getElementById(id).textContent = String(e); });\n"
             "}\n")
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(summary)}</p>"
        f"<h2>Leaderboard</h2>{leaderboard(job)}"
        f"<h2>Charts</h2>{divs}"
        f"<h2>Trials</h2>{trial_table(data['trials'])}"
        f"<script>{inlined}</script>"
        f"<script>{embed}</script></body></html>"
    )
