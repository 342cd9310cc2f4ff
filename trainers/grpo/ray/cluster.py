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
        for k, v in local_env().items():  # the Ray processes started below read these
            os.environ.setdefault(k, v)
        # The driver read the switch when `ray` was first imported, possibly before this call.
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] != "0"
    if address is None:
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 configure_logging=False, log_to_driver=True, runtime_env=runtime_env)
    else:
        ray.init(address=address, runtime_env=runtime_env, configure_logging=False)
    return True
