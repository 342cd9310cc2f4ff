"""Where a run's rows come from: the environment's training prompts and the expert file.

The prompts can be filtered for length (``max_prompt_len``); the expert rows (``expert_data``,
chat rows with ``messages``) feed the ``mix`` preset and the SFT warm-up.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from trainers.grpo.data.batch import TrainRow, expert_rows
from verifiers.errors import ConfigError


def training_rows(env: Any, tokenizer: Any, cfg: Any, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """The environment's training split, without the prompts longer than ``max_prompt_len``;
    refused when fewer than one step's prompts are left."""
    rows = _training_rows(env, tokenizer, cfg.max_prompt_len, log)
    if len(rows) < cfg.prompts_per_step:
        raise ConfigError(
            f"the training split has {len(rows)} prompts, fewer than prompts_per_step={cfg.prompts_per_step}"
        )
    return rows


def _training_rows(env: Any, tokenizer: Any, max_prompt_len: int | None,
                   log: Callable[[str], None]) -> list[dict[str, Any]]:
    data = env.get_dataset()
    if max_prompt_len is None:
        return list(data.rows)
    from verifiers.data.filtering import filter_overlong

    kept, stats = filter_overlong(data.hf, tokenizer, max_prompt_len)
    log(
        f"overlong filter: kept {stats.kept}/{stats.total} prompts "
        f"({stats.overlong} too long, {stats.template_failures} failed the chat template)"
    )
    # The HF view stores ``info`` as JSON text (Arrow cannot hold differently-keyed dicts)
    return [{**r, "info": json.loads(r["info"])} if isinstance(r.get("info"), str) else r for r in kept.to_list()]


def expert_sets(cfg: Any, preset: Any, tokenizer: Any) -> tuple[list[TrainRow], list[TrainRow], list[TrainRow]]:
    """The expert file's rows for a run: MIX's SFT half (every assistant token), the first warm-up
    phase (``sft_warmup_tokens``) and the second (every token, of ``sft_warmup_all_data`` where set);
    each empty when the run has no use for it."""
    def rows(wanted: bool, tokens: Literal["all", "content"], data: str | None = None) -> list[TrainRow]:
        if not wanted:
            return []
        key = "sft_warmup_all_data" if data else "expert_data"
        return load_expert(data or cfg.expert_data, tokenizer, cfg.max_seq_len, tokens, key)

    return (rows(preset.mix is not None, "all"), rows(bool(cfg.sft_warmup_steps), cfg.sft_warmup_tokens),
            rows(bool(cfg.sft_warmup_all_steps), "all", cfg.sft_warmup_all_data))


def load_expert(expert_data: str | None, tokenizer: Any, max_seq_len: int,
                tokens: Literal["all", "content"] = "all", key: str = "expert_data") -> list[TrainRow]:
    """The expert file's conversations as training rows (``tokens``: which assistant tokens train;
    ``key``: the config key that named the file, for the errors)."""
    path = Path(expert_data or "")
    if not path.is_file():
        raise ConfigError(f"{key} {path} does not exist")
    convs, tools = [], []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{i + 1} is not valid JSON ({exc.msg}, column {exc.colno}): each line of "
                              "expert_data must be one JSON object with a 'messages' list") from None
        if not isinstance(row, dict) or "messages" not in row:
            raise ConfigError(f"{path}:{i + 1} has no 'messages' list (chat rows are needed for SFT)")
        convs.append(row["messages"])
        tools.append(row.get("tools"))  # a tool-using episode is rendered with its tool schemas
    rows = expert_rows(tokenizer, convs, max_seq_len, tools=tools, tokens=tokens)
    if not rows:
        what = "assistant turns" if tokens == "all" else "assistant content (text or tool-call arguments)"
        raise ConfigError(f"{path} has no {what} to train on")
    return rows
