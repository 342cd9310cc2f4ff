"""The rollout engine: concurrency, timeouts, interleaved scoring."""

from verifiers.rollout.inputs import RolloutInput
from verifiers.rollout.runner import run_rollouts, run_single
from verifiers.rollout.tokens import TokenSequence, assemble_tokens

__all__ = ["RolloutInput", "TokenSequence", "assemble_tokens", "run_rollouts", "run_single"]
