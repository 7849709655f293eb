"""Which images a task needs and what its trials do about them (plan.images)."""

from __future__ import annotations

import pytest

from shipyard.api.models import ImageBuildStatus
from shipyard.plan.images import (
    ImageSettingError,
    ImageSettings,
    ImagesFailed,
    ImagesReady,
    ImagesUnavailable,
    ImagesWait,
    context_files,
    image_needs,
    images_status,
    repository_name,
    trial_images,
)
from shipyard.taskformat import load_task_files
from shipyard.taskformat.content_hash import environment_content_hash

BUILDKIT = ImageSettings(backend="buildkit", registry="reg.example:5000/shipyard")
DOCKERFILE = b"FROM debian:bookworm\nRUN true\n"


def task(toml: str = "", **files: bytes):
    base = {
        "task.toml": (b'schema_version = "1.4"\n' + toml.encode()),
        "instruction.md": b"Do it.\n",
        "tests/test.sh": b"echo 1 > /logs/verifier/reward.txt\n",
    }
    base.update({k.replace("__", "/"): v for k, v in files.items()})
    return load_task_files(base, name="org/My_Task")


def test_dockerfile_only_environment_is_built_under_harbors_tag():
    t = task(environment__Dockerfile=DOCKERFILE, environment__app__x_py=b"print(1)\n")
    (need,) = image_needs(t, BUILDKIT)
    digest = environment_content_hash(t.tree("environment/"), dir_name="environment")
    assert need.role == "environment" and need.build
    assert need.ref == f"reg.example:5000/shipyard/my_task:{digest}"
    assert need.build_name == f"build-{digest[:24]}"
    assert need.cache_ref == "reg.example:5000/shipyard/my_task:buildcache"


def test_docker_image_is_prebuilt_unless_forced():
    toml = '[environment]\ndocker_image = "python:3.12-slim"\n'
    t = task(toml, environment__Dockerfile=DOCKERFILE)
    (need,) = image_needs(t, BUILDKIT)
    assert (need.ref, need.build) == ("python:3.12-slim", False)
    (forced,) = image_needs(t, BUILDKIT, force_build=True)
    assert forced.build and forced.ref.startswith("reg.example:5000/shipyard/my_task:")


def test_separate_verifier_with_tests_dockerfile_is_its_own_build():
    toml = ('[verifier]\nenvironment_mode = "separate"\n'
            '[environment]\ndocker_image = "localhost/x:1"\n')
    t = task(toml, tests__Dockerfile=b"FROM python:3.12-slim\nCOPY test.sh /tests/\n")
    env, verifier = image_needs(t, BUILDKIT)
    assert (env.role, env.build) == ("environment", False)
    assert verifier.role == "verifier" and verifier.build and verifier.context_dir == "tests/"
    assert verifier.context_hash == environment_content_hash(t.tree("tests/"), dir_name="tests")


def test_no_builder_keeps_the_clear_error():
    with pytest.raises(ImagesUnavailable) as e:
        image_needs(task(environment__Dockerfile=DOCKERFILE), ImageSettings())
    assert e.value.reason == "NoImageBuilder"
    assert "environment/Dockerfile" in e.value.message
    assert "[environment].docker_image" in e.value.message


def test_compose_is_refused():
    with pytest.raises(ImagesUnavailable, match="docker-compose"):
        image_needs(task(**{"environment/docker-compose.yaml": b"services: {}\n"}), BUILDKIT)


def test_a_compose_build_of_main_from_the_task_directory_wins_over_environment():
    """Harbor merges the task's compose file over its base one: main's `build` there (here the
    task's directory, to COPY app/ beside environment/) is what is built."""
    compose = (b"services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n"
               b"      dockerfile: ${CONTEXT_DIR}/Dockerfile\n")
    t = task(environment__Dockerfile=b"FROM debian:bookworm\nCOPY app/ /app/\n",
             **{"app/data.txt": b"x\n", "environment/docker-compose.yaml": compose})
    (need,) = image_needs(t, BUILDKIT)
    assert (need.context_dir, need.dockerfile, need.build) == ("", "environment/Dockerfile", True)
    files = context_files(t, need)
    assert files["app/data.txt"] == b"x\n" and files["task.toml"].startswith(b"schema_version")
    assert files["Dockerfile"] == files["environment/Dockerfile"]


def test_settings_from_env():
    s = ImageSettings.from_env({"SHIPYARD_BUILD_BACKEND": "buildkit",
                                "SHIPYARD_BUILD_REGISTRY": "r:5000/p/",
                                "SHIPYARD_BUILD_REGISTRY_INSECURE": "1",
                                "SHIPYARD_BUILD_NODE_SELECTOR": "pool=builds,zone=a"})
    assert (s.registry, s.insecure_registry) == ("r:5000/p", True)
    assert dict(s.node_selector) == {"pool": "builds", "zone": "a"}
    assert ImageSettings.from_env({}).backend == "none"
    with pytest.raises(ImageSettingError, match="registry"):
        ImageSettings.from_env({"SHIPYARD_BUILD_BACKEND": "buildkit"})
    with pytest.raises(ImageSettingError, match="kaniko"):
        ImageSettings.from_env({"SHIPYARD_BUILD_BACKEND": "kaniko"})


def test_build_extra_hosts_from_env_are_checked():
    s = ImageSettings.from_env({"SHIPYARD_BUILD_ADD_HOSTS":
                                " Astral.sh=198.18.0.1, pypi.internal=fd00::5 ,"})
    assert s.add_hosts == (("astral.sh", "198.18.0.1"), ("pypi.internal", "fd00::5"))
    assert ImageSettings.from_env({}).add_hosts == ()
    for bad, why in (("astral.sh", "NAME=IP"), ("=1.2.3.4", "NAME=IP"),
                     ("a b=1.2.3.4", "NAME=IP"), ("1.2.3.4=1.2.3.5", "NAME=IP"),
                     ("x.y=1.2.3", "not an IP"),
                     ("x.y=host.z", "not an IP"), ("-x.y=1.2.3.4", "NAME=IP")):
        with pytest.raises(ImageSettingError, match=f"SHIPYARD_BUILD_ADD_HOSTS.*{why}"):
            ImageSettings.from_env({"SHIPYARD_BUILD_ADD_HOSTS": bad})


def test_repository_name():
    assert repository_name("terminal-bench/Hello World") == "hello-world"
    assert repository_name("___") == "task"


def _needs():
    t = task(environment__Dockerfile=DOCKERFILE)
    return image_needs(t, BUILDKIT)


def test_images_status_building_then_ready_then_failed():
    needs = _needs()
    name = needs[0].build_name
    images, cond = images_status(needs, {name: None}, {}, "t", 1)
    assert (cond.status, cond.reason) == ("False", "Building")
    assert images["environment"].build == name and images["environment"].source is None
    done = ImageBuildStatus(phase="Succeeded", source="built", digest="sha256:ab")
    images, cond = images_status(needs, {name: done}, {name: "other/ref:1"}, "t", 1)
    assert cond.status == "True" and images["environment"].ref == "other/ref:1"
    assert (images["environment"].digest, images["environment"].source) == ("sha256:ab",
                                                                            "built")
    failed = ImageBuildStatus(phase="Failed", reason="BuildTimeout", message="too slow")
    _, cond = images_status(needs, {name: failed}, {}, "t", 1)
    assert (cond.reason, cond.message) == ("BuildTimeout", "environment image: too slow")
    unavailable = ImageBuildStatus(phase="Pending", reason="RegistryUnavailable")
    _, cond = images_status(needs, {name: unavailable}, {}, "t", 1)
    assert cond.reason == "RegistryUnavailable"


def test_trial_images_wait_run_or_fail():
    needs = _needs()
    name = needs[0].build_name
    assert isinstance(trial_images(needs, {name: None}, {}), ImagesWait)
    done = ImageBuildStatus(phase="Succeeded", source="cached")
    ready = trial_images(needs, {name: done}, {})
    assert isinstance(ready, ImagesReady) and ready.refs == {"environment": needs[0].ref}
    failed = trial_images(needs, {name: ImageBuildStatus(phase="Failed", reason="BuildTimeout",
                                                         message="x")}, {})
    assert isinstance(failed, ImagesFailed) and failed.reason == "ImageBuildFailed"
    # A Trial with its own image does not wait for the environment's build.
    assert trial_images(needs, {name: None}, {}, environment_override=True) == ImagesReady({})
