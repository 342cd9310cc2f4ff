"""Environment packages: scaffold them (``vf-init``), publish them to a PEP 503 hub (``vf-build``)
and install them from a hub, a folder, a wheel or git (``vf-install``). See docs/hub.md."""

from verifiers.hub.build import BuildResult, build_hub, build_wheel, find_environment_dirs
from verifiers.hub.index import HubFile, normalize_project_name, parse_index_links, scan_hub, write_index
from verifiers.hub.install import (
    HubConfig,
    InstallResult,
    InstallTarget,
    LoadedEnvironment,
    configured_hub,
    install_environment,
    resolve_spec,
    verify_installed,
)
from verifiers.hub.scaffold import EnvNames, ScaffoldResult, env_names, scaffold_environment

__all__ = [
    "BuildResult",
    "EnvNames",
    "HubConfig",
    "HubFile",
    "InstallResult",
    "InstallTarget",
    "LoadedEnvironment",
    "ScaffoldResult",
    "build_hub",
    "build_wheel",
    "configured_hub",
    "env_names",
    "find_environment_dirs",
    "install_environment",
    "normalize_project_name",
    "parse_index_links",
    "resolve_spec",
    "scaffold_environment",
    "scan_hub",
    "verify_installed",
    "write_index",
]
