"""The closed vocabulary of reasons: the words in status and Events, and their documentation."""

from __future__ import annotations

import json
import re
from pathlib import Path

from shipyard.api.models import Condition
from shipyard.api.reasons import (
    REASONS_COMPLETE,
    REASONS_FAILED,
    RETRYABLE,
    SWEEP_REASONS,
    WAITING,
    Reason,
)

ROOT = Path(__file__).resolve().parents[3]


def documented(path: str) -> set[str]:
    return set(re.findall(r"`([A-Z][A-Za-z]+)`", (ROOT / path).read_text()))


def test_every_terminal_reason_is_documented_in_the_readme_and_docs() -> None:
    for path in ("README.md", "docs/trials.md"):
        assert {str(r) for r in REASONS_FAILED | REASONS_COMPLETE} <= documented(path), path


def test_every_sweep_reason_is_documented() -> None:
    assert {str(r) for r in SWEEP_REASONS} <= documented("docs/sweeps.md")


def test_reasons_are_plain_words_in_status() -> None:
    cond = Condition(type="Failed", status="True", reason=str(Reason.POD_LOST))
    assert json.loads(cond.model_dump_json())["reason"] == "PodLost"
    assert Reason.POD_LOST == "PodLost" and str(Reason.POD_LOST) == "PodLost"
    assert type(str(Reason.POD_LOST)) is str


def test_phase_reasons() -> None:
    assert Reason.running("agent") is Reason.AGENT_RUNNING
    assert Reason.started("verifier") is Reason.VERIFIER_STARTED
    for kind in ("healthcheck", "setup", "agent", "collect", "verifier"):
        assert Reason.running(kind) and Reason.started(kind)


def test_sets() -> None:
    assert RETRYABLE <= REASONS_FAILED
    assert not WAITING & REASONS_FAILED
    assert not REASONS_COMPLETE & REASONS_FAILED
