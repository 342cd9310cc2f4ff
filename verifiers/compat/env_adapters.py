"""0.1.x shapes around the environment API: extra constructor kwargs, inputs, datasets, training outputs.

Each lives in the core now; this path re-exports the same objects for code written
against it:

- `set_legacy_attributes` (`verifiers._helpers`): 0.1.x ``Environment(**kwargs)``/
  ``Rubric(**kwargs)`` stored every extra keyword as an attribute.
- `GenerateInputs`, `ProcessedOutputs` (`verifiers.types`): the 0.1.x pydantic models of
  ``generate``'s input columns and of ``process_env_results_vllm``'s output.
- `process_results_from_tokens` (`verifiers.rollout.tokens`): 0.1.x
  ``process_env_results_vllm`` from the token ids the server returned per turn.
- `results_to_dataset` (`verifiers.data.results`): 0.1.x ``make_dataset``.
- `generate_inputs_to_columns`: the columns of a `GenerateInputs` that were given.
"""

from __future__ import annotations

from typing import Any

from verifiers._helpers import set_legacy_attributes
from verifiers.data.results import (
    _sanitize_tool_calls as _sanitize_tool_calls,  # private, kept for old imports
)
from verifiers.data.results import results_to_dataset
from verifiers.rollout.tokens import process_results_from_tokens
from verifiers.types import GenerateInputs, ProcessedOutputs

__all__ = [
    "GenerateInputs",
    "ProcessedOutputs",
    "generate_inputs_to_columns",
    "process_results_from_tokens",
    "results_to_dataset",
    "set_legacy_attributes",
]


def generate_inputs_to_columns(inputs: GenerateInputs) -> dict[str, list[Any]]:
    """The columns that were given (``None`` columns dropped; ``completion`` is not an input)."""
    return {k: v for k, v in inputs.model_dump().items() if v is not None and k != "completion"}
