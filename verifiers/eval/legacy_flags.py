"""What 0.1.x ``vf-eval`` flags need beyond the core runner: local environment folders and
pushing results to the Hugging Face Hub (error shares live in `verifiers.rollout.error_report`).

Kept apart from `verifiers.eval.runner` so the runner's configuration stays the typed
core; the CLI calls these helpers around `run_eval`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from verifiers.envs.names import ENVIRONMENTS_DIR, find_local_env, module_name
from verifiers.errors import ConfigError, VFError

DEFAULT_ENV_DIR = ENVIRONMENTS_DIR
"""0.1.x's default ``--env-dir-path``: used only when it holds the requested environment."""


class HubUnavailableError(VFError):
    """The results could not be pushed to the Hugging Face Hub (offline, no token, refused)."""


def add_env_dir(env_id: str, env_dir: str | os.PathLike[str] | None, *, explicit: bool) -> Path | None:
    """Make the environment ``env_id`` importable from a folder of local environments.

    Both 0.1.x layouts work: ``DIR/<name>/<name>.py`` (a flat module beside its
    pyproject.toml) and ``DIR/<name>/<name>/__init__.py`` (a package), as well as a
    module or package directly in ``DIR`` (`verifiers.envs.names.find_local_env`, the lookup
    `load_environment` makes in ``./environments`` too). The folder goes first on ``sys.path``,
    so a local copy wins over an installed one (what someone editing it expects).
    Returns the path added, or None when the folder does not hold the environment
    (an error only when the folder was given explicitly with ``-p``).
    """
    root = Path(env_dir if env_dir is not None else DEFAULT_ENV_DIR).expanduser()
    if not root.is_dir():
        if explicit:
            raise ConfigError(f"-p/--env-dir-path {str(root)!r} is not a directory")
        return None
    name = module_name(env_id)
    base = find_local_env(env_id, root)
    if base is not None:
        path = str(base.resolve())
        if path not in sys.path:
            sys.path.insert(0, path)
        importlib.invalidate_caches()
        sys.modules.pop(name, None)  # a previously imported installed copy must not shadow it
        return base
    if explicit:
        raise ConfigError(
            f"environment {env_id!r} not found in {str(root)!r}: expected {name}/{name}.py, "
            f"{name}/{name}/__init__.py or {name}.py there"
        )
    return None


def default_hub_dataset_name(env_id: str, model: str) -> str:
    """``<env>--<model>`` with characters the Hub refuses replaced (0.1.x required -D or made one up)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{env_id}--{model}").strip("-.")[:96]


def hub_dataset(run_dir: Path) -> Any:
    """The `datasets.Dataset` ``-H`` pushes: one row per saved rollout (see `verifiers.eval.export`)."""
    from verifiers.eval.export import to_dataset

    return to_dataset(run_dir)


def push_to_hub(run_dir: Path, repo_id: str) -> str:
    """Push the run's rollouts as a dataset to ``repo_id``; `HubUnavailableError` says why not."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") or os.environ.get(
        "HF_DATASETS_OFFLINE", "0"
    ).lower() in ("1", "true", "yes"):
        raise HubUnavailableError(
            f"cannot push to the Hugging Face Hub: offline mode is set (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); "
            f"the results are saved in {run_dir} (export them with --save-dataset DIR)"
        )
    if importlib.util.find_spec("huggingface_hub") is None:
        raise HubUnavailableError("cannot push to the Hugging Face Hub: huggingface_hub is not installed")
    dataset = hub_dataset(run_dir)
    try:
        dataset.push_to_hub(repo_id)
    except Exception as exc:
        raise HubUnavailableError(
            f"could not push {len(dataset)} rollouts to the Hugging Face Hub as {repo_id!r} "
            f"({type(exc).__name__}: {str(exc)[:300]}); check the network and `huggingface-cli login`; "
            f"the results are saved in {run_dir}"
        ) from exc
    return repo_id
