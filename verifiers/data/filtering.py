"""Drop rows whose templated prompt is longer than the prompt budget, before training starts.

An overlong prompt otherwise fails (or is silently truncated) in the middle of a run.
Like verl's ``filter_overlong_prompts``, a row whose chat template raises is dropped
as well: it could never be rendered for the model either. The count of such rows is
reported separately, with a few example errors, so a broken template or a malformed
column is not mistaken for "the prompts are long".

Lengths are measured with `datasets.Dataset.map` over ``num_proc`` worker processes.
Give a tokenizer (it is pickled to the workers) or a tokenizer path/name (each worker
loads it once with ``AutoTokenizer.from_pretrained``).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from verifiers.data.templating import encode_prompt
from verifiers.errors import ConfigError

if TYPE_CHECKING:
    from datasets import Dataset

_LEN = "__vf_prompt_len"
_ERR = "__vf_template_error"
MAX_FAILURE_EXAMPLES = 5


class FilterStats(BaseModel):
    """What `filter_overlong` kept and why it dropped the rest."""

    total: int
    kept: int
    overlong: int
    template_failures: int
    max_prompt_len: int
    longest_kept: int = 0
    failure_examples: list[str] = []

    @property
    def dropped(self) -> int:
        """Rows removed for any reason (overlong + template failures)."""
        return self.total - self.kept


@functools.lru_cache(maxsize=4)
def _load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


class _PromptLength:
    """Picklable row function: the templated prompt length, or -1 and the error text."""

    def __init__(
        self,
        tokenizer: Any,
        prompt_key: str,
        tools: Any,
        tools_key: str | None,
        template_kwargs: Mapping[str, Any],
    ) -> None:
        is_path = isinstance(tokenizer, str | os.PathLike)
        self.tokenizer_path = os.fspath(tokenizer) if is_path else None
        self.tokenizer = None if self.tokenizer_path else tokenizer
        self.prompt_key = prompt_key
        self.tools = tools
        self.tools_key = tools_key
        self.template_kwargs = dict(template_kwargs)

    def __call__(self, row: dict[str, Any], index: int) -> dict[str, Any]:
        tok = self.tokenizer if self.tokenizer is not None else _load_tokenizer(self.tokenizer_path or "")
        tools = row.get(self.tools_key) if self.tools_key else self.tools
        try:
            ids = encode_prompt(tok, row[self.prompt_key], tools=tools, **self.template_kwargs)
        except Exception as exc:  # any failure to render the row counts as overlong (verl behaviour)
            return {_LEN: -1, _ERR: f"row {index}: {type(exc).__name__}: {exc}"[:500]}
        return {_LEN: len(ids), _ERR: ""}


def filter_overlong(
    dataset: Dataset,
    tokenizer_or_path: Any,
    max_prompt_len: int,
    *,
    num_proc: int = 1,
    prompt_key: str = "prompt",
    tools: Sequence[Mapping[str, Any]] | str | None = None,
    tools_key: str | None = None,
    **template_kwargs: Any,
) -> tuple[Dataset, FilterStats]:
    """Keep the rows whose prompt renders to at most ``max_prompt_len`` tokens.

    ``prompt_key`` names a column of chat messages (templated with the generation
    prompt) or of plain text (completion-mode prompts, encoded as is). Tools offered
    to the model are part of the prompt: pass them once with ``tools`` (an environment's
    ``oai_tools``) or per row with ``tools_key``. Returns the kept rows (same columns,
    same order) and `FilterStats`.
    """
    if isinstance(max_prompt_len, bool) or not isinstance(max_prompt_len, int) or max_prompt_len < 1:
        raise ConfigError(f"max_prompt_len must be a positive integer, got {max_prompt_len!r}")
    if num_proc < 1:
        raise ConfigError(f"num_proc must be >= 1, got {num_proc}")
    columns = list(dataset.column_names)
    if prompt_key not in columns:
        raise ConfigError(
            f"cannot filter: the dataset has no column {prompt_key!r} (columns: {columns}); pass prompt_key=..."
        )
    if tools_key is not None and tools_key not in columns:
        raise ConfigError(f"tools_key {tools_key!r} is not a column of the dataset (columns: {columns})")
    if tools_key is not None and tools is not None:
        raise ConfigError("give tools either for every row (tools=...) or per row (tools_key=...), not both")
    if isinstance(tools, str):
        tools = json.loads(tools)
    total = len(dataset)
    if total == 0:
        return dataset, FilterStats(
            total=0, kept=0, overlong=0, template_failures=0, max_prompt_len=max_prompt_len
        )
    measure = _PromptLength(tokenizer_or_path, prompt_key, tools, tools_key, template_kwargs)
    measured = dataset.map(
        measure,
        with_indices=True,
        num_proc=num_proc if num_proc > 1 else None,
        remove_columns=columns,
        desc=f"measuring prompts (max {max_prompt_len} tokens)",
        load_from_cache_file=False,
    )
    lengths: list[int] = list(measured[_LEN])
    errors = [e for e in measured[_ERR] if e]
    keep = [i for i, n in enumerate(lengths) if 0 <= n <= max_prompt_len]
    kept_dataset = dataset.select(keep) if len(keep) < total else dataset
    stats = FilterStats(
        total=total,
        kept=len(keep),
        overlong=sum(1 for n in lengths if n > max_prompt_len),
        template_failures=len(errors),
        max_prompt_len=max_prompt_len,
        longest_kept=max((lengths[i] for i in keep), default=0),
        failure_examples=errors[:MAX_FAILURE_EXAMPLES],
    )
    return kept_dataset, stats
