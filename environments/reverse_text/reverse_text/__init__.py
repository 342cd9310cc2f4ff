"""reverse-text: reverse a short English sentence character by character.

A single-turn formatting task: the model must think inside ``<think>`` and answer
inside ``<answer>``; the answer is scored by LCS similarity to the exact reversal.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf
from reverse_text.data import load_words, make_examples
from reverse_text.reward import lcs_length, lcs_similarity

__all__ = ["SYSTEM_PROMPT", "lcs_length", "lcs_reward", "lcs_similarity", "load_environment", "load_words"]

SYSTEM_PROMPT = """Reverse the text the user sends, character by character: the last character \
comes first and the first character comes last. Keep every character, including spaces, \
capital letters and punctuation.

Think step by step inside <think>...</think>, then give only the reversed text inside \
<answer>...</answer>."""


def lcs_reward(completion: vf.Messages, answer: str, parser: vf.Parser) -> float:
    """LCS similarity between the parsed ``<answer>`` and the reversed text (0.0 without an answer).

    Markup tokens inside the answer (``<tool_call>``, ``<|im_end|>``) are not text the user reads,
    so they neither match nor count against the answer.
    """
    parsed = parser.parse_answer(completion)
    if parsed is None:
        return 0.0
    return lcs_similarity(vf.strip_markup(parsed), answer)


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    min_words: int = 3,
    max_words: int = 8,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs: Any,
) -> vf.Environment:
    """Build the reverse-text environment.

    Args:
        num_train_examples: Size of the training split (0: evaluation only).
        num_eval_examples: Size of the evaluation split, disjoint from training (0: none).
        seed: Seed of the text generator; the same seed always gives the same splits.
        min_words: Fewest words per sentence.
        max_words: Most words per sentence.
        system_prompt: Instructions shown before each text.
        **kwargs: Passed on to ``vf.SingleTurnEnv`` (e.g. ``sampling_args``).
    """
    if num_train_examples < 0 or num_eval_examples < 0:
        raise ValueError("num_train_examples and num_eval_examples must be >= 0")
    if num_train_examples == 0 and num_eval_examples == 0:
        raise ValueError("ask for at least one training or evaluation example")
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words} and {max_words}")
    rng = random.Random(seed)
    seen: set[str] = set()
    train = make_examples(num_train_examples, rng, min_words, max_words, seen)
    evaluation = make_examples(num_eval_examples, rng, min_words, max_words, seen)

    parser = vf.XMLParser(["think", "answer"], answer_field="answer")
    rubric = vf.Rubric(
        funcs=[lcs_reward, parser.get_format_reward_func()],
        weights=[1.0, 0.2],
        parser=parser,
    )
    return vf.SingleTurnEnv(
        dataset=train or None,
        eval_dataset=evaluation or None,
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
        **kwargs,
    )
