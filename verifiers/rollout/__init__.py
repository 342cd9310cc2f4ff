"""The rollout engine: concurrency, timeouts, interleaved scoring."""

from verifiers.rollout.inputs import RolloutInput
from verifiers.rollout.runner import run_rollouts, run_single

__all__ = ["RolloutInput", "run_rollouts", "run_single"]
