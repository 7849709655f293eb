"""Harbor 0.25's own job statistics over an exported job directory, computed by Harbor's code in
its own virtualenv (Python 3.12): `python harbor_stats.py JOB_DIR [TRIAL_NAME ...]` prints
JSON `{"stats": JobStats, "metrics": {eval key: [Mean]}, "pass_at_k": {...}}`. The trials are
read in the order named (the plan's), else by name. Run by the tests with the harbor venv's
python; it imports nothing of Shipyard's."""

import sys
from collections import defaultdict
from pathlib import Path

from harbor.metrics.mean import Mean
from harbor.models.job.result import JobStats
from harbor.models.trial.result import TrialResult
from harbor.utils.pass_at_k import compute_pass_at_k_by_evals


def main() -> None:
    root = Path(sys.argv[1])
    names = sys.argv[2:] or sorted(p.parent.name for p in root.glob("*/result.json"))
    results = [TrialResult.model_validate_json((root / n / "result.json").read_text())
               for n in names]
    stats = JobStats.from_trial_results(results)
    rewards = defaultdict(list)
    for r in results:
        key = JobStats.format_agent_evals_key(
            r.agent_info.name, r.agent_info.model_info.name if r.agent_info.model_info
            else None, r.source or "adhoc")
        rewards[key].append(r.verifier_result.rewards if r.verifier_result else None)
    for key, values in rewards.items():
        stats.evals[key].metrics = [Mean().compute(values)]
    for key, passes in compute_pass_at_k_by_evals(results).items():
        stats.evals[key].pass_at_k = passes
    print(stats.model_dump_json())


if __name__ == "__main__":
    main()
