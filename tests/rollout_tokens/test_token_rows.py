"""Histories that are not one growing prefix become several token rows (`split_token_rows`).

Each case is a history an agent program really produces; the rows are checked token for token
(ids, loss mask, logprobs), and every sampled token of the distinct calls must be trained in
exactly one row.
"""

from __future__ import annotations

from verifiers.rollout.tokens import assemble_tokens, prefix_breaks, split_token_rows
from verifiers.types import RolloutResult, TokenSequence, TurnTokens


def call(prompt: list[int], completion: list[int], first_logprob: float) -> TurnTokens:
    """A model call whose sampled tokens have logprobs first_logprob, first_logprob - 0.01, ..."""
    lps = [round(first_logprob - 0.01 * k, 4) for k in range(len(completion))]
    return TurnTokens(prompt_ids=prompt, completion_ids=completion, completion_logprobs=lps)


def flat(row: TokenSequence) -> tuple[list[int], list[int], list[float]]:
    return row.completion_ids, row.completion_mask, row.completion_logprobs


def trained_tokens(rows: list[TokenSequence]) -> list[int]:
    return [t for r in rows for t, m in zip(r.completion_ids, r.completion_mask, strict=True) if m]


def distinct_completion_tokens(turns: list[TurnTokens]) -> int:
    return sum(len(c) for c in {(tuple(t.prompt_ids), tuple(t.completion_ids)): t.completion_ids for t in turns}.values())


def test_linear_history_is_one_row_equal_to_assemble_tokens() -> None:
    turns = [
        call([1, 2], [3, 4], -0.1),
        call([1, 2, 3, 4, 9], [5], -0.3),
        call([1, 2, 3, 4, 9, 5, 8, 8], [6, 7], -0.5),
    ]
    rows = split_token_rows(turns)
    assert len(rows) == 1 and prefix_breaks(rows) == 0
    assert rows[0].prompt_ids == [1, 2]
    assert flat(rows[0]) == (
        [3, 4, 9, 5, 8, 8, 6, 7],
        [1, 1, 0, 1, 0, 0, 1, 1],
        [-0.1, -0.11, 0.0, -0.3, 0.0, 0.0, -0.5, -0.51],
    )
    old = assemble_tokens(turns)
    assert (rows[0].prompt_ids, flat(rows[0])) == (old.prompt_ids, flat(old))


def test_compaction_summary_prompt_opens_a_second_row() -> None:
    """Call 3's prompt is a new short prompt holding a summary of calls 1-2."""
    turns = [
        call([1, 2], [3, 4], -0.1),
        call([1, 2, 3, 4, 9], [5, 6], -0.2),
        call([1, 40, 41], [7], -0.3),  # system + summary: not an extension of row 1
        call([1, 40, 41, 7, 9], [8], -0.4),
    ]
    rows = split_token_rows(turns)
    assert len(rows) == 2 and prefix_breaks(rows) == 1
    assert rows[0].prompt_ids == [1, 2]
    assert flat(rows[0]) == ([3, 4, 9, 5, 6], [1, 1, 0, 1, 1], [-0.1, -0.11, 0.0, -0.2, -0.21])
    assert rows[1].prompt_ids == [1, 40, 41]
    assert flat(rows[1]) == ([7, 9, 8], [1, 0, 1], [-0.3, 0.0, -0.4])
    assert len(trained_tokens(rows)) == distinct_completion_tokens(turns) == 6


def test_stripped_reasoning_opens_a_row_with_the_answer_as_context() -> None:
    """The template drops call 1's think tokens (50 51 52 = <think> x </think>) from call 2's prompt."""
    turns = [
        call([1, 2], [50, 51, 52, 3, 4], -0.1),
        call([1, 2, 3, 4, 9], [5], -0.2),
    ]
    rows = split_token_rows(turns)
    assert len(rows) == 2 and prefix_breaks(rows) == 1
    assert rows[0].prompt_ids == [1, 2]
    assert flat(rows[0]) == ([50, 51, 52, 3, 4], [1] * 5, [-0.1, -0.11, -0.12, -0.13, -0.14])
    # call 1's visible answer is context of row 2, not trained a second time
    assert rows[1].prompt_ids == [1, 2, 3, 4, 9]
    assert flat(rows[1]) == ([5], [1], [-0.2])
    assert trained_tokens(rows) == [50, 51, 52, 3, 4, 5]


def test_interleaved_sub_agent_keeps_its_own_row() -> None:
    """A, A, B, A: the sub-agent B's call does not break agent A's row."""
    a1 = call([1, 2], [3], -0.1)
    a2 = call([1, 2, 3, 9], [4, 5], -0.2)
    b1 = call([60, 61], [62, 63], -0.3)
    a3 = call([1, 2, 3, 9, 4, 5, 9, 62, 63], [6], -0.4)  # B's answer arrives as a tool result
    rows = split_token_rows([a1, a2, b1, a3])
    assert len(rows) == 2 and prefix_breaks(rows) == 1
    assert rows[0].prompt_ids == [1, 2]
    assert flat(rows[0]) == (
        [3, 9, 4, 5, 9, 62, 63, 6],
        [1, 0, 1, 1, 0, 0, 0, 1],
        [-0.1, 0.0, -0.2, -0.21, 0.0, 0.0, 0.0, -0.4],
    )
    assert rows[1].prompt_ids == [60, 61]
    assert flat(rows[1]) == ([62, 63], [1, 1], [-0.3, -0.31])
    assert len(trained_tokens(rows)) == distinct_completion_tokens([a1, a2, b1, a3]) == 6


def test_longest_matching_context_wins() -> None:
    """Two rows whose contexts both prefix the prompt: the call joins the longer one."""
    turns = [
        call([1], [2], -0.1),  # row 1, context 1 2
        call([1], [2, 5], -0.2),  # a resample: row 2, context 1 2 5
        call([1, 2, 5, 7], [8], -0.3),  # both contexts prefix it; row 2's is longer
    ]
    rows = split_token_rows(turns)
    assert len(rows) == 2
    assert (rows[0].prompt_ids, flat(rows[0])) == ([1], ([2], [1], [-0.1]))
    assert (rows[1].prompt_ids, flat(rows[1])) == ([1], ([2, 5, 7, 8], [1, 1, 0, 1], [-0.2, -0.21, 0.0, -0.3]))


def test_replayed_retry_adds_no_tokens() -> None:
    first = call([1, 2], [3, 4], -0.1)
    second = call([1, 2, 3, 4, 9], [5], -0.2)
    turns = [first, first.model_copy(deep=True), second, second.model_copy(deep=True)]
    rows = split_token_rows(turns)
    assert len(rows) == 1 and prefix_breaks(rows) == 0
    assert flat(rows[0]) == ([3, 4, 9, 5], [1, 1, 0, 1], [-0.1, -0.11, 0.0, -0.2])
    assert len(trained_tokens(rows)) == distinct_completion_tokens(turns) == 3


def test_a_resample_of_the_same_prompt_is_its_own_row() -> None:
    """Same prompt, different completion (a retry that sampled again): both are trained once."""
    turns = [call([1, 2], [3], -0.1), call([1, 2], [4, 5], -0.2)]
    rows = split_token_rows(turns)
    assert [(r.prompt_ids, r.completion_ids) for r in rows] == [([1, 2], [3]), ([1, 2], [4, 5])]


def test_missing_logprobs_are_zero_and_no_calls_give_no_rows() -> None:
    rows = split_token_rows([TurnTokens(prompt_ids=[1], completion_ids=[2, 3])])
    assert flat(rows[0]) == ([2, 3], [1, 1], [0.0, 0.0])
    assert split_token_rows([]) == [] and prefix_breaks([]) == 0


def test_rollout_result_token_rows() -> None:
    turns = [call([1, 2], [50, 3], -0.1), call([1, 2, 3, 9], [5], -0.2)]
    r = RolloutResult(example_id=0, prompt=[], completion=[], tokens=turns)
    assert not r.token_sequence().prefix_consistent  # the old single-sequence view still says so
    assert [row.prompt_ids for row in r.token_rows()] == [[1, 2], [1, 2, 3, 9]]
