"""Cluster errors described in one line, for the CLI and the layers above kube."""

from __future__ import annotations

import json

from shipyard.kube.errors import (
    ApiException,
    ConfigException,
    describe,
    error_body,
    is_server_error,
)


def api_error(status: int, message: str) -> ApiException:
    e = ApiException(status=status, reason="Reason")
    e.body = json.dumps({"message": message}).encode()
    return e


def test_api_errors_say_what_the_cluster_answered() -> None:
    assert describe(api_error(403, "forbidden: no")) == "the cluster answered 403: forbidden: no"
    missing = describe(api_error(404, "the server could not find the requested resource"))
    assert "are the Shipyard CRDs installed?" in missing


def test_other_errors() -> None:
    assert "no cluster configured" in describe(ConfigException("no config"))
    assert describe(TimeoutError("slow")) == "slow"
    assert describe(ValueError("not ours")) is None


def test_error_body_and_server_errors() -> None:
    e = api_error(500, "x" * 1000)
    assert is_server_error(e) and not is_server_error(api_error(422, "bad"))
    assert len(error_body(e)) == 300 and error_body(e).startswith('{"message": "xxx')


def test_a_create_in_a_namespace_being_deleted_is_told_apart() -> None:
    from shipyard.kube.errors import namespace_terminating

    def refused(status: int, body: object) -> ApiException:
        e = ApiException(status=status, reason="Forbidden")
        e.body = json.dumps(body) if not isinstance(body, str) else body
        return e

    terminating = {
        "kind": "Status", "status": "Failure", "reason": "Forbidden",
        "message": 'trials.shipyard.dev "t-1" is forbidden: unable to create new content in '
                   "namespace t-70d6573c because it is being terminated",
        "details": {"name": "t-1", "causes": [{"reason": "NamespaceTerminating",
                                               "field": "metadata.namespace"}]}}
    assert namespace_terminating(refused(403, terminating))
    rbac = {"kind": "Status", "reason": "Forbidden", "message": "cannot create trials"}
    assert not namespace_terminating(refused(403, rbac))
    assert not namespace_terminating(refused(403, "not json"))
    assert not namespace_terminating(refused(409, terminating))
    assert not namespace_terminating(RuntimeError("x"))
