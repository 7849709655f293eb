"""The ENTRYPOINT cache: one read per image however many trials ask, known for a while,
unknown retried later, and a slow read never holds the others past its own time."""

from __future__ import annotations

import threading
import time

import pytest

from shipyard.kube.registry import ImageConfig
from shipyard.plan.images import ImageSettings
from shipyard.runtime import image_configs


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    image_configs._cache.clear()
    monkeypatch.setattr(image_configs, "image_settings", lambda: ImageSettings(
        registry="reg:5000/p", insecure_registry=True, mirrors={"docker.io": "m:5000"}))

    def read(ref, access, timeout):
        seen.append(ref)
        assert access.insecure == frozenset({"reg:5000"})
        assert access.mirrors == {"docker.io": "m:5000"}
        if "slow" in ref:
            time.sleep(timeout + 1.5)  # past even the waiters' bound
        if "huge" in ref:
            return ImageConfig(("x" * 1000,) * 20, ())
        return None if "private" in ref else ImageConfig(("/e",) if "entry" in ref else (), ())

    monkeypatch.setattr(image_configs, "image_config", read)
    return seen


def test_each_image_is_read_once_and_unknown_ones_are_left_out(reads: list[str]) -> None:
    refs = ["python:3.12", "reg:5000/p/t:entry", None, "ghcr.io/private/x:1", "huge:1"]
    assert image_configs.entrypoints(refs) == {"python:3.12": (),
                                               "reg:5000/p/t:entry": ("/e",)}
    assert image_configs.entrypoints([*refs, "python:3.12"]) == image_configs.entrypoints(refs)
    assert sorted(reads) == ["ghcr.io/private/x:1", "huge:1", "python:3.12",
                             "reg:5000/p/t:entry"]


def test_a_slow_read_does_not_hold_the_trials_that_wait_for_it(
        reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_configs, "READ_SEC", 0.3)
    first = threading.Thread(target=image_configs.entrypoints, args=(["slow:1"],))
    first.start()
    time.sleep(0.05)
    began = time.monotonic()
    assert image_configs.entrypoints(["slow:1"]) == {}
    assert time.monotonic() - began < 1.6
    first.join()
    assert reads == ["slow:1"]
