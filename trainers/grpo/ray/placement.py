"""Where a run's rollouts are generated: in the trainer's process, or on Ray workers (``[ray]``)."""

from __future__ import annotations

from typing import Any

from trainers.grpo.data.feed import store_kwargs
from trainers.grpo.data.generator import BatchGenerator
from trainers.grpo.data.store import ExperienceStore


def build_rollouts(cfg: Any, preset: Any, dist: Any, sync: Any, env: Any, rows: list[dict[str, Any]],
                   sampling_args: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(generator, store, ray)``: a `BatchGenerator` and an `ExperienceStore` in this process (``ray``
    None), or Ray workers and a store actor (``ray`` the `RayRollouts` that owns them; Ray is imported
    only then)."""
    kwargs = store_kwargs(cfg, preset.filter_zero_std_groups)
    if cfg.ray is not None:
        from trainers.grpo.ray.rollouts import start_for_trainer

        ray = start_for_trainer(cfg, dist, sync, env, rows, sampling_args, kwargs)
        return ray.generator, ray.store, ray
    return BatchGenerator.for_run(cfg, env, rows, sync, sampling_args, dist), ExperienceStore(**kwargs), None
