"""Importing Ray and joining (or starting) a cluster, with one clear message when it is missing.

Ray is the ``ray`` extra: nothing imports it at module level, so ``verifiers`` and the
in-process trainer work without it. A local cluster started here binds every Ray process
to 127.0.0.1 and has no dashboard: on a shared machine nothing should listen on other
addresses unless a user asked for a multi-machine cluster (``address = "auto"`` or
``"HOST:PORT"`` of a cluster started with ``ray start``).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from verifiers.errors import ConfigError
from verifiers.install_hint import install_command


def require_ray() -> ModuleType:
    """``import ray``, or a `ConfigError` naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            f"this run uses Ray ([ray] in the config) but Ray is not installed: {install_command('ray')}"
        ) from exc
    return ray


def local_env() -> dict[str, str]:
    """Environment for a loopback-only local cluster (read by Ray when it starts its processes).

    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is Ray's switch for a cluster that uses the
    loopback address as the node address (what it does on a laptop); with it, the GCS,
    the raylet and the workers listen on 127.0.0.1 only.
    """
    return {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def init_ray(address: str | None, *, num_cpus: int | None = None,
             runtime_env: dict[str, Any] | None = None) -> bool:
    """Join ``address`` or start a local 127.0.0.1 cluster; True when this call started Ray.

    Already initialised (a test's cluster, a driver script's own ``ray.init``): used as is.
    """
    ray = require_ray()
    if ray.is_initialized():
        return False
    if address is None:
        _loopback_only()
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 configure_logging=False, log_to_driver=True, runtime_env=runtime_env)
    else:
        ray.init(address=address, runtime_env=runtime_env, configure_logging=False)
    return True


def _loopback_only() -> None:
    """Set the switches of a loopback-only cluster in this process (see `local_env`)."""
    for k, v in local_env().items():  # the Ray processes started after this read these
        os.environ.setdefault(k, v)
    # The driver read the switch when `ray` was first imported, possibly before this call.
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] != "0"


def cluster_address() -> tuple[str, str, str | None]:
    """``(GCS address, node IP, auth mode)`` of the cluster this process is connected to: what another
    training process needs to join it (`join_ray`). The auth mode is ``RAY_AUTH_MODE`` as ``ray.init``
    left it: a new local cluster turns token authentication on in the process that started it."""
    ray = require_ray()
    return (str(ray.get_runtime_context().gcs_address), str(ray.util.get_node_ip_address()),
            os.environ.get("RAY_AUTH_MODE"))


def join_ray(address: str, node_ip: str, auth_mode: str | None = None) -> bool:
    """Join the cluster at ``address`` as reported by rank 0 (`cluster_address`); True when this call
    connected (False: this process was already connected, e.g. to a test's cluster).

    Rank 0 on a loopback ``node_ip`` started (or joined) a 127.0.0.1 cluster, which only processes on
    its machine can join: this process then uses the same loopback node address. Otherwise Ray picks
    this machine's address, which must be a node of the cluster (``ray start --address`` there).
    ``auth_mode``: rank 0's; with ``"token"`` this process presents the cluster's token, which Ray
    reads from ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, as rank 0 did.
    """
    import ipaddress

    ray = require_ray()
    if ray.is_initialized():
        return False
    if auth_mode and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = auth_mode
        from ray._raylet import Config

        Config.initialize("")  # Ray caches its settings: re-read them, as ray.init does when it sets the mode
    if ipaddress.ip_address(node_ip).is_loopback:
        _loopback_only()
        ray.init(address=address, _node_ip_address=node_ip, configure_logging=False, log_to_driver=False)
    else:
        ray.init(address=address, configure_logging=False, log_to_driver=False)
    return True
