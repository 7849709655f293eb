"""A sweep's results, computed once: Harbor's job statistics (docs/harbor.md §e.3, §e.4) over
the finished plan slots, bit for bit as Harbor 0.25 computes them from the same trial results in
the same order. The Sweep status, `shipyard sweep results` (table, `--json`, `-o`),
`shipyard results` and `shipyard sweep report` all read their numbers from here, so a
leaderboard number does not depend on where it is read.

The order is the plan's (Harbor's: attempts x tasks x agents); a slot whose Task cannot run
counts as a finished trial with an exception and no reward, as the docs say.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shipyard.taskformat import aggregate_rewards, pass_at_k

Tokens = tuple[int | None, int | None, int | None, float | None]
NO_TOKENS: Tokens = (None, None, None, None)


@dataclass(frozen=True)
class Outcome:
    """One finished trial (or a slot that cannot run) as Harbor's JobStats.increment sees it."""

    key: str
    """The eval key (`agent__model__dataset` or `agent__dataset`)."""
    task: str
    trial: str
    rewards: Mapping[str, float] | None
    exception: str | None
    tokens: Tokens = NO_TOKENS


def add_tokens(total: Tokens, more: Tokens) -> Tokens:
    """Harbor's running totals: `(total or 0) + part` for each part reported (cost from 0.0)."""
    return (
        total[0] if more[0] is None else (total[0] or 0) + more[0],
        total[1] if more[1] is None else (total[1] or 0) + more[1],
        total[2] if more[2] is None else (total[2] or 0) + more[2],
        total[3] if more[3] is None else (total[3] or 0.0) + more[3],
    )


def reward_key(value: float) -> str:
    """A reward value as a key of Harbor's `reward_stats` in JSON (pydantic: an int as an int,
    a float by its repr: 1 → "1", 1.0 → "1.0")."""
    return json.dumps(value)


@dataclass
class EvalResult:
    """Harbor's AgentDatasetStats of one eval key, with the key's token totals."""

    rewards: list[Mapping[str, float] | None] = field(default_factory=list)
    by_task: dict[str, list[Mapping[str, float] | None]] = field(default_factory=dict)
    n_trials: int = 0
    n_errors: int = 0
    metrics: list[dict[str, float]] = field(default_factory=list)
    pass_at_k: dict[int, float] = field(default_factory=dict)
    reward_stats: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    exception_stats: dict[str, list[str]] = field(default_factory=dict)
    tokens: Tokens = NO_TOKENS

    def add(self, outcome: Outcome) -> None:
        self.rewards.append(outcome.rewards)
        self.by_task.setdefault(outcome.task, []).append(outcome.rewards)
        if outcome.rewards is not None:
            self.n_trials += 1
            for name, value in outcome.rewards.items():
                self.reward_stats.setdefault(name, {}).setdefault(
                    reward_key(value), []).append(outcome.trial)
        if outcome.exception is not None:
            self.n_errors += 1
            self.exception_stats.setdefault(outcome.exception, []).append(outcome.trial)
        self.tokens = add_tokens(self.tokens, outcome.tokens)

    @property
    def exception_counts(self) -> dict[str, int]:
        return {kind: len(names) for kind, names in sorted(self.exception_stats.items())}

    def harbor(self) -> dict[str, Any]:
        """As in Harbor's job `result.json` (`stats.evals[key]`), plus the token totals."""
        return {
            "n_trials": self.n_trials,
            "n_errors": self.n_errors,
            "metrics": self.metrics,
            "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
            "reward_stats": self.reward_stats,
            "exception_stats": self.exception_stats,
            "n_input_tokens": self.tokens[0],
            "n_cache_tokens": self.tokens[1],
            "n_output_tokens": self.tokens[2],
            "cost_usd": self.tokens[3],
        }


def eval_results(outcomes: Iterable[Outcome], metrics: Sequence[str] = ("mean",)
                 ) -> dict[str, EvalResult]:
    """Per eval key (sorted): Harbor's counts, per-value and per-exception trial lists, the
    `metrics` (Harbor's Mean by default; none while the key has no finished trial) and
    pass@k, summed as Python 3.12's `sum()`."""
    evals: dict[str, EvalResult] = {}
    for outcome in outcomes:
        evals.setdefault(outcome.key, EvalResult()).add(outcome)
    for result in evals.values():
        result.metrics = [aggregate_rewards(result.rewards, m) for m in metrics]
        result.pass_at_k = pass_at_k(result.by_task)
    return dict(sorted(evals.items()))


def token_totals(outcomes: Iterable[Outcome]) -> Tokens:
    """The job's totals, added trial by trial in order, as Harbor's JobStats."""
    total = NO_TOKENS
    for outcome in outcomes:
        total = add_tokens(total, outcome.tokens)
    return total


def overall_mean(outcomes: Iterable[Outcome]) -> float | None:
    """The mean reward over every finished slot (a missing reward is 0); None unless the
    rewards have one key (then the mean is per key, see the evals)."""
    rewards = [o.rewards for o in outcomes]
    if not rewards:
        return None
    return aggregate_rewards(rewards, "mean").get("mean")
