"""0.1.x path ``verifiers.utils.data_utils``: answer extractors, prompts and example datasets.

`load_example_dataset` knows the benchmarks 0.1.x environments load by name
(gsm8k, math, math500, aime2024/2025, amc2023, gpqa, mmlu, mmlu_pro, openbookqa,
openrs, prime_code). Each is read from the Hugging Face Hub through ``datasets``
and mapped to ``question``/``answer`` columns exactly as upstream did. Nothing is
bundled: offline, the first load fails with a `ConfigError` that names the Hub
dataset and says how to make it available.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verifiers.errors import ConfigError
from verifiers.parsers.parser import extract_boxed_answer

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = [
    "BOXED_SYSTEM_PROMPT",
    "EXAMPLE_DATASETS",
    "THINK_BOXED_SYSTEM_PROMPT",
    "extract_boxed_answer",
    "extract_hash_answer",
    "get_preprocess_fn",
    "load_example_dataset",
    "strip_non_numeric",
]

THINK_BOXED_SYSTEM_PROMPT = (
    "Think step-by-step inside <think>...</think> tags.     Then, give your final answer inside \\boxed{}."
)
"""Upstream's text, including the run of spaces its source's line continuation left in it."""

# lighteval's default math prompt, as upstream uses it.
BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


def extract_hash_answer(text: str) -> str:
    """GSM8K's answer: the text after ``####`` (stripped); the text unchanged when there is none."""
    if "####" not in text:
        return text
    return text.split("####")[1].strip()


def strip_non_numeric(text: str) -> str:
    """Keep digits and dots only (AIME 2025 answers come with stray characters)."""
    return "".join(c for c in text if c.isdigit() or c == ".")


Row = dict[str, Any]


def _letters_question(question: str, options: list[str], letters: str) -> str:
    return f"Question: {question}\n" + "".join(f"\n{letters[i]}: {opt}" for i, opt in enumerate(options))


def get_preprocess_fn(name: str, seed: int = 0) -> Callable[[Row], Row]:
    """The row mapping upstream applies for ``name``: source columns → ``question``, ``answer``.

    ``seed`` only matters for GPQA, whose choices are shuffled; upstream used the
    global RNG, here the shuffle is seeded so a dataset is the same on every load.
    """
    if name in ("gpqa_diamond", "gpqa_main"):
        rng = random.Random(seed)

        def preprocess_gpqa(x: Row) -> Row:
            letters = ["A", "B", "C", "D"]
            rng.shuffle(letters)
            texts = [
                x["Correct Answer"],
                x["Incorrect Answer 1"],
                x["Incorrect Answer 2"],
                x["Incorrect Answer 3"],
            ]
            by_letter = dict(zip(letters, texts, strict=True))
            body = "\n".join(f"{k}: {by_letter[k]}" for k in "ABCD")
            return {"question": f"Question: {x['Question']}\n\n{body}", "answer": letters[0]}

        return preprocess_gpqa
    table: dict[str, Callable[[Row], Row]] = {
        "aime2024": lambda x: {"question": x["problem"], "answer": str(int(x["answer"]))},
        "aime2025": lambda x: {"question": x["question"], "answer": strip_non_numeric(str(x["answer"]))},
        "amc2023": lambda x: {"question": x["problem"], "answer": x["answer"]},
        "gsm8k": lambda x: {"question": x["question"], "answer": extract_hash_answer(x["answer"])},
        "math": lambda x: {"question": x["problem"], "answer": extract_boxed_answer(x["solution"])},
        "math500": lambda x: {"question": x["problem"], "answer": x["answer"]},
        "mmlu": lambda x: {
            "question": _letters_question(x["question"], x["choices"], "ABCD"),
            "answer": "ABCD"[x["answer"]],
        },
        "mmlu_pro": lambda x: {
            "question": _letters_question(x["question"], x["options"], "ABCDEFGHIJ"),
            "answer": x["answer"],
        },
        "openbookqa": lambda x: {
            "question": f"Question: {x['question_stem']}\n\nChoices:\n"
            + "\n".join(
                f"{lab}. {txt}" for lab, txt in zip(x["choices"]["label"], x["choices"]["text"], strict=True)
            ),
            "answer": x["answerKey"],
        },
        "prime_code": lambda x: {"question": x["prompt"], "answer": x["verification_info"]},
    }
    for variant in ("openrs", "openrs_easy", "openrs_hard"):
        table[variant] = lambda x: {"question": x["problem"], "answer": x["answer"]}
    if name not in table:
        raise ConfigError(f"no preprocessing for example dataset {name!r}; known: {sorted(EXAMPLE_DATASETS)}")
    return table[name]


@dataclass(frozen=True)
class ExampleDataset:
    """Where a named example dataset lives on the Hub, and how upstream selected its rows."""

    path: str
    configs: tuple[str | None, ...]
    default_split: str
    keep: Callable[[Row], bool] | None = None


_PRIME_CODE_PREFIX = "Solve the following coding problem using the programming language python:"

EXAMPLE_DATASETS: dict[str, ExampleDataset] = {
    "aime2024": ExampleDataset("HuggingFaceH4/aime_2024", (None,), "train"),
    "aime2025": ExampleDataset("opencompass/AIME2025", ("AIME2025-I", "AIME2025-II"), "test"),
    "amc2023": ExampleDataset("knoveleng/AMC-23", (None,), "train"),
    "gpqa_diamond": ExampleDataset("Idavidrein/gpqa", ("gpqa_diamond",), "train"),
    "gpqa_main": ExampleDataset("Idavidrein/gpqa", ("gpqa_main",), "train"),
    "gsm8k": ExampleDataset("openai/gsm8k", ("main",), "test"),
    "math": ExampleDataset("chiayewken/competition_math", (None,), "train"),
    "math500": ExampleDataset("HuggingFaceH4/MATH-500", (None,), "test"),
    "mmlu": ExampleDataset("cais/mmlu", ("all",), "dev"),
    "mmlu_pro": ExampleDataset("TIGER-Lab/MMLU-Pro", (None,), "validation"),
    "openbookqa": ExampleDataset("allenai/openbookqa", ("main",), "train"),
    "openrs": ExampleDataset("knoveleng/open-rs", (None,), "train"),
    "openrs_easy": ExampleDataset("knoveleng/open-rs", (None,), "train", keep=lambda x: x["level"] == "Easy"),
    "openrs_hard": ExampleDataset("knoveleng/open-rs", (None,), "train", keep=lambda x: x["level"] == "Hard"),
    "prime_code": ExampleDataset(
        "PrimeIntellect/verifiable-coding-problems",
        (None,),
        "train",
        keep=lambda x: str(x["prompt"]).startswith(_PRIME_CODE_PREFIX),
    ),
}


def _load_from_hub(name: str, source: ExampleDataset, split: str) -> Dataset:
    import datasets

    parts = []
    for config in source.configs:
        where = source.path if config is None else f"{source.path} (config {config!r})"
        try:
            parts.append(datasets.load_dataset(source.path, config, split=split))
        except Exception as exc:  # offline, gated, renamed, wrong split: one clear message
            raise ConfigError(
                f"could not load example dataset {name!r}: Hugging Face dataset {where}, split {split!r}: "
                f"{type(exc).__name__}: {exc}. It is downloaded from the Hugging Face Hub on first use: "
                "run once with network access (and HF_DATASETS_OFFLINE / HF_HUB_OFFLINE unset) so it is "
                f"cached, or load your own copy and pass it as the environment's dataset."
            ) from exc
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def load_example_dataset(
    name: str = "gsm8k", split: str | None = None, n: int | None = None, seed: int = 0
) -> Dataset:
    """A benchmark by name as a ``datasets.Dataset`` with ``question`` and ``answer`` columns.

    ``split`` defaults to the benchmark's usual one (gsm8k: ``test``, math: ``train``,
    mmlu: ``dev``, ...); ``n`` keeps a seeded random sample of that many rows.
    """
    source = EXAMPLE_DATASETS.get(name)
    if source is None:
        raise ConfigError(
            f"unknown example dataset {name!r}; known: {', '.join(sorted(EXAMPLE_DATASETS))}. For other data, "
            "build a dataset with 'question' (or 'prompt') and 'answer' columns yourself."
        )
    split = split or source.default_split
    preprocess = get_preprocess_fn(name, seed)
    dataset = _load_from_hub(name, source, split)
    if source.keep is not None:
        dataset = dataset.filter(source.keep)
    if n is not None and n > 0:
        dataset = dataset.shuffle(seed=seed).select(range(min(n, len(dataset))))
    return dataset.map(preprocess, remove_columns=dataset.column_names)
