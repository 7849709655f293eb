"""What the operator logs when it cannot take or renew its Lease: one line in the apiserver's
words, with the setting to change when the Lease's namespace does not exist (it printed the
client's whole dump of headers and body every 2 s)."""

from __future__ import annotations

import json

from shipyard.kube.errors import ApiException
from shipyard.plan.settings import LEASE_NAMESPACE_ENV, LeaderSettings
from shipyard.runtime.leader import Leadership


def _refusal(status: int, reason: str, message: str) -> ApiException:
    e = ApiException(status=status, reason=reason)
    e.body = json.dumps({"kind": "Status", "status": "Failure", "message": message,
                         "code": status})
    return e


def test_a_lease_namespace_that_does_not_exist_is_named_with_the_setting_to_change():
    leader = Leadership(LeaderSettings(namespace="gone"), ["t-a"])
    why = leader._why(_refusal(404, "Not Found", 'namespaces "gone" not found'))
    assert "\n" not in why
    assert why.startswith('the cluster answered 404: namespaces "gone" not found')
    assert LEASE_NAMESPACE_ENV in why and "does not exist" in why


def test_other_refusals_are_one_line_in_the_apiservers_words():
    leader = Leadership(LeaderSettings(namespace="ops"), ["t-a"])
    why = leader._why(_refusal(403, "Forbidden", 'leases.coordination.k8s.io "x" is forbidden'))
    assert why == 'the cluster answered 403: leases.coordination.k8s.io "x" is forbidden'
    assert leader._why(OSError("connection reset")) == "connection reset"
