"""A tiny environment package for the vf-eval CLI tests (loaded as ``vf-eval-test-echo``).

The directory holding this file is put on ``sys.path``/``PYTHONPATH`` by the tests.
"""

from __future__ import annotations

import verifiers as vf


def exact(completion: vf.Messages, answer: str) -> float:
    texts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return float(bool(texts) and texts[-1].strip() == answer)


def load_environment(num_examples: int = 6) -> vf.Environment:
    """``num_examples`` questions q0..; an echo server answers the even ones correctly."""
    rows = [{"question": f"q{i}", "answer": f"q{i}" if i % 2 == 0 else "other"} for i in range(num_examples)]
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[exact]))
