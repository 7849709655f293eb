"""The operator's settings (`shipyard.plan.settings`), read from the environment once, when the
operator starts; every handler reads them from here."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from shipyard.kube import local_defaults
from shipyard.kube import network as kube_network
from shipyard.plan.network import NetworkConfig, NetworkSettings
from shipyard.plan.settings import IN_POD_ENV, OperatorSettings, with_cluster_defaults

_settings: OperatorSettings | None = None


def load(environ: Mapping[str, str] | None = None) -> OperatorSettings:
    """From `environ`; by default the process's environment over the defaults the cluster
    publishes for an operator run by hand (`plan.settings.with_cluster_defaults`)."""
    global _settings
    if environ is None:
        published = {} if IN_POD_ENV in os.environ else local_defaults.published()
        environ = with_cluster_defaults(os.environ, published)
        taken = sorted(k for k in published if k.startswith("SHIPYARD_") and k not in os.environ)
        if taken:
            logging.getLogger(__name__).info(
                f"settings from the cluster's {local_defaults.NAMESPACE}/{local_defaults.NAME}"
                f" (set them to override): {', '.join(taken)}")
    _settings = OperatorSettings.from_env(environ)
    return _settings


def current() -> OperatorSettings:
    return _settings if _settings is not None else load()


def cluster_network_settings(config: NetworkConfig) -> NetworkSettings:
    """The operator's network settings against what this cluster serves (cached lookups)."""
    settings = config.resolve(kube_network.discovered_fqdn_apis(),
                              kube_network.node_ip_families(),
                              kube_network.apiserver_addresses(),
                              kube_network.cluster_ranges(), kube_network.apiserver_sockets(),
                              kube_network.dns_sockets())
    _tell_fence(config, settings)
    return settings


_fence_told = False


def _tell_fence(config: NetworkConfig, settings: NetworkSettings) -> None:
    """Once per process: whether trial pods get the network fence, and why not."""
    global _fence_told
    if _fence_told:
        return
    _fence_told = True
    log = logging.getLogger("shipyard.network")
    if settings.fence is not None:
        start = ("no program of the task's image starts before it either (the main "
                 "container's command, or an init container)" if settings.fence.containers
                 else "the task image's ENTRYPOINT and compose sidecars start unfenced "
                 "(SHIPYARD_NETWORK_FENCE_CONTAINERS=false)")
        log.info(f"network fence: each trial pod's first phase waits up to "
                 f"{settings.fence.timeout_sec:g} s for its policy to refuse the apiserver "
                 f"({', '.join(settings.fence.sockets)}); {start}")
    elif config.fence_sec > 0 and (config.block_apiserver or config.block_cluster):
        log.warning("network fence off: the apiserver's addresses could not be read (may the "
                    "operator get the default/kubernetes Service and its Endpoints?): trial "
                    "pods start without proof that their network policy is in force")
