"""Rubrics: weighted reward functions that score finished rollouts."""

from verifiers.rubrics.judge_rubric import DEFAULT_JUDGE_PROMPT, JudgeRubric
from verifiers.rubrics.math_rubric import MathRubric, math_equal
from verifiers.rubrics.rubric import RewardFunc, Rubric, RubricGroup, group_reward
from verifiers.rubrics.tool_rubric import ToolRubric

__all__ = [
    "DEFAULT_JUDGE_PROMPT",
    "JudgeRubric",
    "MathRubric",
    "RewardFunc",
    "Rubric",
    "RubricGroup",
    "ToolRubric",
    "group_reward",
    "math_equal",
]
