"""`completions/markup_share`: how much of what the policy samples is markup a user never reads.

Issue 47: on vLLM a run collapsed onto four `<tool_call>` tokens (11 characters that a
character-fraction reward paid for) while every logged metric looked like plain entropy loss.
The share of sampled markup tokens would have shown the drift on the first steps.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainers.grpo.algo.advantages import group_stats  # noqa: E402
from trainers.grpo.algo.algorithms import get_algorithm  # noqa: E402
from trainers.grpo.data.assemble import BatchAssembler, markup_token_ids  # noqa: E402
from trainers.grpo.data.batch import TrainRow  # noqa: E402
from trainers.grpo.dist.ranks import Dist  # noqa: E402
from verifiers.models.tiny import TOOL_TOKENS, build_char_tokenizer  # noqa: E402
from verifiers.types import RolloutResult  # noqa: E402


def test_markup_tokens_are_the_added_non_special_ones() -> None:
    tok = build_char_tokenizer("json")
    ids = markup_token_ids(tok)
    assert sorted(tok.convert_ids_to_tokens(sorted(ids))) == sorted(TOOL_TOKENS)
    assert tok.eos_token_id not in ids and tok.pad_token_id not in ids  # special: they end or pad a reply


def test_the_share_counts_trained_completion_tokens_only() -> None:
    tok = build_char_tokenizer("json")
    call = tok.convert_tokens_to_ids("<tool_call>")
    a = tok.convert_tokens_to_ids("a")
    prompt = tok.encode("Say a")
    # reply 1: <tool_call> x4 (all markup); reply 2: "aa" + <tool_call> + "a" (1 of 4); a markup id in
    # the prompt is not the policy's and must not count
    replies = [[call] * 4, [a, a, call, a]]
    rows = [TrainRow(input_ids=[call, *prompt, *r], loss_mask=[0] * len(prompt) + [1] * len(r),
                     sampler_logp=[0.0] * (len(prompt) + len(r)), reward=float(i), group=0, is_truncated=False,
                     completion_len=len(r), rollout=i) for i, r in enumerate(replies)]
    results = [RolloutResult(example_id=0, prompt=[], completion=[], reward=float(i)) for i in range(2)]
    asm = BatchAssembler(None, get_algorithm("grpo"), Dist(), tok.pad_token_id, [], markup_token_ids(tok))
    stats = group_stats(torch.tensor([0.0, 1.0]), torch.tensor([0, 0]))
    metrics = asm.metrics(results, rows, None, stats)
    assert metrics["completions/markup_share"] == pytest.approx(5 / 8)
    plain = BatchAssembler(None, get_algorithm("grpo"), Dist(), tok.pad_token_id, []).metrics(results, rows, None, stats)
    assert "completions/markup_share" not in plain  # a tokenizer without markup tokens logs none
