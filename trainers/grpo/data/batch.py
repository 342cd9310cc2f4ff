"""Scored rollouts → token-exact training tensors.

Token ids are the ones the server returned for every turn (`RolloutResult.token_sequence`),
never a re-tokenisation of the transcript, so what is trained on is exactly what was
sampled. Environment and tool tokens between turns are in the sequence (the model must
see them) but masked out of the loss; the attention mask (all real tokens) is separate
from the loss mask (sampled tokens only).

A rollout whose model calls are not one growing history (a summary that replaces the
transcript, a template that strips earlier reasoning, a sub-agent's own conversation) gives
several rows (`RolloutResult.token_rows`). They share the rollout's reward and advantage and
carry its key (``TrainRow.rollout``, ``TrainBatch.rollout_ids``) so that the loss weighs the
rollout once, not once per row (`trainers.grpo.algo.losses.rollout_token_counts`).

Tensors are over *targets*: column ``t`` of ``loss_mask`` / ``sampler_logp`` refers to
token ``t + 1`` predicted from positions ``<= t``, matching ``logits[:, :-1]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from verifiers.errors import ConfigError
from verifiers.types import RolloutResult, TokenSequence


@dataclass
class TrainRow:
    input_ids: list[int]
    loss_mask: list[int]  # over targets (len(input_ids) - 1)
    sampler_logp: list[float]  # over targets
    reward: float
    group: int
    is_truncated: bool
    completion_len: int
    is_expert: bool = False
    prompt_len: int = 0  # tokens of the initial prompt (shared by a group's samples)
    rollout: int = -1  # the rollout this row is part of (a running index in the step); -1: a rollout of its own


@dataclass
class TrainBatch:
    input_ids: Tensor  # [N, L] right-padded
    attention_mask: Tensor  # [N, L]
    position_ids: Tensor  # [N, L]
    loss_mask: Tensor  # [N, L-1] bool
    sampler_logp: Tensor  # [N, L-1]
    rewards: Tensor  # [N]
    group_ids: Tensor  # [N] int64
    is_truncated: Tensor  # [N] bool
    is_expert: Tensor  # [N] bool
    prompt_lens: Tensor | None = None  # [N] int64; 0 = unknown (no prompt sharing)
    prompt_ids: Tensor | None = None  # [N] int64: rows with equal values share their prompt (found at collate)
    advantages: Tensor | None = None
    rollout_ids: Tensor | None = None  # [N] int64: rows with equal values are one rollout's
    sequence_tokens: Tensor | None = None  # [N]: trained tokens of each row's rollout (set by the learner)
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: Any) -> TrainBatch:
        """The same batch on ``device`` (the model's: batches are built on the CPU)."""
        moved = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in self.__dict__.items()}
        return TrainBatch(**moved)

    def select(self, idx: Tensor) -> TrainBatch:
        """Rows ``idx``, trimmed to their longest real length (padding costs compute)."""
        width = int(self.attention_mask.index_select(0, idx).sum(1).max())
        width = max(width, 2)
        return TrainBatch(
            input_ids=self.input_ids.index_select(0, idx)[:, :width],
            attention_mask=self.attention_mask.index_select(0, idx)[:, :width],
            position_ids=self.position_ids.index_select(0, idx)[:, :width],
            loss_mask=self.loss_mask.index_select(0, idx)[:, : width - 1],
            sampler_logp=self.sampler_logp.index_select(0, idx)[:, : width - 1],
            rewards=self.rewards.index_select(0, idx),
            group_ids=self.group_ids.index_select(0, idx),
            is_truncated=self.is_truncated.index_select(0, idx),
            is_expert=self.is_expert.index_select(0, idx),
            prompt_lens=None if self.prompt_lens is None else self.prompt_lens.index_select(0, idx),
            prompt_ids=None if self.prompt_ids is None else self.prompt_ids.index_select(0, idx),
            advantages=None if self.advantages is None else self.advantages.index_select(0, idx),
            rollout_ids=None if self.rollout_ids is None else self.rollout_ids.index_select(0, idx),
            sequence_tokens=None if self.sequence_tokens is None else self.sequence_tokens.index_select(0, idx),
        )


def rows_from_result(r: RolloutResult, group: int, max_seq_len: int, overlong: str,
                     rollout: int = -1) -> list[TrainRow]:
    """The rollout's training rows, one per prefix-growing history of its model calls.

    A linear multi-turn history is one row; a call that does not extend an earlier one (a
    compaction summary, reasoning stripped by the template, a sub-agent) starts another
    (`verifiers.types.split_token_rows`). Every row gets the rollout's reward, group and key
    ``rollout``. Empty when the rollout has no token data (e.g. it failed before the model
    answered). ``overlong`` applies to each row: a row longer than ``max_seq_len`` is cut
    (``'truncate'``, marked truncated) or left out (``'drop'``); a row whose prompt alone does
    not fit is left out either way. A rollout that errored after the model produced tokens is
    trained on with the reward it got (usually 0).
    """
    return rows_from_sequences(r.token_rows(), r, group, max_seq_len, overlong, rollout)


def rows_from_sequences(seqs: Sequence[TokenSequence], r: RolloutResult, group: int, max_seq_len: int,
                        overlong: str, rollout: int = -1) -> list[TrainRow]:
    """`rows_from_result` for rows already split (the assembler also counts their prefix breaks)."""
    rows = [_row(seq, r, group, max_seq_len, overlong, rollout) for seq in seqs]
    return [row for row in rows if row is not None]


def row_from_result(r: RolloutResult, group: int, max_seq_len: int, overlong: str) -> TrainRow | None:
    """The rollout's only training row (`rows_from_result`), or None when it gives none or several."""
    rows = rows_from_result(r, group, max_seq_len, overlong)
    return rows[0] if len(rows) == 1 else None


def _row(seq: TokenSequence, r: RolloutResult, group: int, max_seq_len: int, overlong: str,
         rollout: int) -> TrainRow | None:
    """One token row as training targets; None when it samples nothing or does not fit."""
    if not any(seq.completion_mask):
        return None
    prompt, comp = list(seq.prompt_ids), list(seq.completion_ids)
    mask, lps = list(seq.completion_mask), list(seq.completion_logprobs)
    if len(lps) < len(comp):
        lps += [0.0] * (len(comp) - len(lps))
    truncated = bool(r.is_truncated)
    if len(prompt) + len(comp) > max_seq_len:
        room = max_seq_len - len(prompt)
        if overlong == "drop" or room < 1:
            return None
        comp, mask, lps = comp[:room], mask[:room], lps[:room]
        truncated = True
    ids = prompt + comp
    # targets 0..len(ids)-2; completion token j is target len(prompt)-1+j
    tmask = [0] * (len(prompt) - 1) + mask
    tlp = [0.0] * (len(prompt) - 1) + [lp if m else 0.0 for lp, m in zip(lps, mask, strict=True)]
    return TrainRow(ids, tmask, tlp, float(r.reward), group, truncated, int(sum(mask)), prompt_len=len(prompt),
                    rollout=rollout)


def collate(rows: Sequence[TrainRow], pad_id: int) -> TrainBatch:
    """The rows as one right-padded batch.

    Each field is made from one flat list in one copy (`_right_padded`), not a tensor per row.
    """
    n = len(rows)
    lengths = torch.tensor([len(r.input_ids) for r in rows], dtype=torch.long)
    width = int(lengths.max())
    attn = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    ids = _right_padded([r.input_ids for r in rows], attn.bool(), pad_id, torch.long)
    targets = attn[:, 1:].bool()  # a row of L tokens has L - 1 targets
    lmask = _right_padded([r.loss_mask for r in rows], targets, 0, torch.bool)
    slp = _right_padded([r.sampler_logp for r in rows], targets, 0.0, torch.float32)
    assert ids.shape == (n, width)
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    return TrainBatch(
        input_ids=ids,
        attention_mask=attn,
        position_ids=pos,
        loss_mask=lmask,
        sampler_logp=slp,
        rewards=torch.tensor([r.reward for r in rows], dtype=torch.float32),
        group_ids=torch.tensor([r.group for r in rows], dtype=torch.long),
        is_truncated=torch.tensor([r.is_truncated for r in rows], dtype=torch.bool),
        is_expert=torch.tensor([r.is_expert for r in rows], dtype=torch.bool),
        prompt_lens=torch.tensor([r.prompt_len for r in rows], dtype=torch.long),
        prompt_ids=torch.tensor(_prompt_ids(rows), dtype=torch.long),
        rollout_ids=torch.tensor(_rollout_ids(rows), dtype=torch.long),
    )


def _right_padded(values: Sequence[Sequence[Any]], where: Tensor, fill: Any, dtype: torch.dtype) -> Tensor:
    """``values[i]`` at the start of row ``i`` of a ``where``-shaped grid (``where`` is True exactly
    there, a prefix of each row), ``fill`` elsewhere: one tensor from the concatenated lists."""
    flat = torch.tensor([v for row in values for v in row], dtype=dtype)
    if flat.numel() != int(where.sum()):
        raise ValueError(f"rows hold {flat.numel()} values for {int(where.sum())} positions: every row needs "
                         "one loss-mask and sampler-logprob entry per target (len(input_ids) - 1)")
    out = torch.full(where.shape, fill, dtype=dtype)
    out[where] = flat
    return out


def _rollout_ids(rows: Sequence[TrainRow]) -> list[int]:
    """Dense rollout ids (0, 1, ... in order of first row): rows with the same ``rollout`` key share
    one; a row without a key (``rollout < 0``: expert rows, rows built by hand) is its own rollout."""
    ids: dict[int, int] = {}
    out = []
    for i, r in enumerate(rows):
        key = r.rollout if r.rollout >= 0 else -1 - i
        out.append(ids.setdefault(key, len(ids)))
    return out


def _prompt_ids(rows: Sequence[TrainRow]) -> list[int]:
    """Rows with the same group and the same prompt tokens get the same id.

    Found here, on the host, from the rows' token lists: the learner would otherwise compare
    prompts on the device row by row, a blocking round trip for each.
    """
    ids: dict[tuple[int, tuple[int, ...]], int] = {}
    return [ids.setdefault((r.group, tuple(r.input_ids[: r.prompt_len])), len(ids)) for r in rows]


def expert_rows(
    tokenizer: Any,
    conversations: Sequence[list[dict[str, Any]]],
    max_seq_len: int,
    tools: Sequence[Any] | None = None,
    tokens: Literal["all", "content"] = "all",
) -> list[TrainRow]:
    """SFT rows for MIX and the SFT warm-up: assistant tokens are trained on, the rest masked.

    The assistant spans are found by rendering growing prefixes of the conversation, the
    same chat template as generation uses. ``tools`` gives each conversation's tool schemas
    (or None): a tool-using environment's prompts list its tools in the system turn, so its
    expert episodes must be rendered with the same schemas to match what the model sees.
    ``tokens="content"`` trains only each assistant message's own content (its text and its
    tool calls' argument values, `trainers.grpo.data.content_spans`), not the template's markup;
    conversations with no such content are left out.
    """
    from verifiers.data.templating import apply_chat_template

    if tools is not None and len(tools) != len(conversations):
        raise ValueError(f"tools has {len(tools)} entries for {len(conversations)} conversations; give one each")
    out = []
    for i, conv in enumerate(conversations):
        schemas = tools[i] if tools is not None else None

        def render(msgs: list[dict[str, Any]], gen: bool, schemas: Any = schemas, text: bool = False) -> Any:
            rendered = apply_chat_template(tokenizer, msgs, tools=schemas, add_generation_prompt=gen, tokenize=not text)
            return rendered if text else list(rendered)

        ids = render(conv, False)
        mask = [0] * len(ids)
        content = _ContentTokens(tokenizer, render(conv, False, text=True), ids) if tokens == "content" else None
        for k, m in enumerate(conv):
            if m.get("role") != "assistant":
                continue
            if content is not None:  # the message's own characters, mapped to tokens by offsets
                chars = (len(render(conv[:k], True, text=True)) if k else 0, len(render(conv[: k + 1], False, text=True)))
                mask = [a | b for a, b in zip(mask, content.mask(chars, m), strict=True)]
                continue
            start = len(render(conv[:k], True)) if k else 0
            end = len(render(conv[: k + 1], False))
            for j in range(start, min(end, len(ids))):
                mask[j] = 1
        ids, mask = ids[:max_seq_len], mask[:max_seq_len]
        if len(ids) < 2 or sum(mask[1:]) == 0:
            continue
        out.append(TrainRow(ids, mask[1:], [0.0] * (len(ids) - 1), 0.0, -1, False, sum(mask[1:]), is_expert=True))
    return out


class _ContentTokens:
    """Maps an assistant message's content spans in the rendered text onto the rendered token ids."""

    def __init__(self, tokenizer: Any, text: str, ids: list[int]) -> None:
        try:
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        except NotImplementedError as exc:  # slow tokenizers have no offsets
            raise ConfigError("SFT on content tokens needs a fast tokenizer (character offsets)") from exc
        if list(enc["input_ids"]) != list(ids):
            raise ConfigError(
                "SFT on content tokens needs the chat template's text to tokenize to the same ids as the "
                "template renders; this tokenizer does not (train on all assistant tokens instead)"
            )
        self.text = text
        self.offsets = [tuple(o) for o in enc["offset_mapping"]]

    def mask(self, chars: tuple[int, int], message: dict[str, Any]) -> list[int]:
        from trainers.grpo.data.content_spans import content_char_spans, token_mask_from_spans

        return token_mask_from_spans(self.offsets, content_char_spans(self.text, chars[0], chars[1], message))
