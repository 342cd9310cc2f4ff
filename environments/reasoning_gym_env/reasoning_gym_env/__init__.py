"""reasoning-gym: any of reasoning-gym's procedural datasets as an environment, scored by its own scorer.

reasoning-gym (PyPI ``reasoning-gym``, Apache-2.0) is the field's offline library of procedural
reasoning tasks: ~100 generators (arithmetic families, chain sums, GSM-style word problems,
countdown, letter and word puzzles, logic, graphs) each with its own ``score_answer``. Nothing is
downloaded at run time: every problem is generated from a seed.

``vf.load_environment("reasoning-gym", dataset="chain_sum", size=1000, seed=0, config={...})``
builds one dataset; ``dataset={"chain_sum": 1, "basic_arithmetic": 2}`` (or a list of
``{"name", "weight", "config"}``) a weighted mix through reasoning-gym's composite dataset. The
two splits are generated from seeds hashed from ``seed`` (`generator_seed`: reasoning-gym's own seeds
s and s+1 share all but one problem), and no evaluation question is a training question. The system prompt is reasoning-gym's own (it asks
for the answer inside ``<answer>...</answer>``), and the reward is the generating dataset's
``score_answer`` on that answer, read from the text a user sees (`vf.reply_text`).
``answer_format="boxed"`` asks for and reads the last ``\boxed{...}`` instead, and ``"number"`` (for
datasets whose answers are numbers) asks for a boxed number and reads the number math-verify finds
in the reply, boxed or in plain prose, as the ``arithmetic`` environment grades: a small instruction
model writes neither reasoning-gym's tags nor boxes (SmolLM2-135M-Instruct: 0 of 720 replies with
tags on six datasets; 1 of 200 with a box on ``chain_sum`` when asked for one) but does state numbers, so its skill can
be measured and trained apart from a markup it would first have to learn. The scorer is still the
dataset's own ``score_answer``, given the answer each format reads.

The module is ``reasoning_gym_env``: ``reasoning_gym`` is the library. The id resolves through
the ``verifiers.environments`` entry point (installed) or ``environments/reasoning_gym_env`` (a clone).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import verifiers as vf
from verifiers.errors import ConfigError

try:
    import reasoning_gym
    from reasoning_gym.composite import DatasetSpec
    from reasoning_gym.factory import DATASETS
    from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer
except ModuleNotFoundError as exc:
    if exc.name != "reasoning_gym":
        raise
    raise ConfigError("the reasoning-gym environment needs the reasoning-gym package: "
                      "pip install 'verifiers[reasoning-gym]' (or pip install -e environments/reasoning_gym_env)") from None

__all__ = ["available_datasets", "dataset_options", "generator_seed", "load_environment", "read_answer", "read_boxed", "read_number"]

SPLITS = ("train", "eval")


def generator_seed(seed: int, split: str) -> int:
    """The reasoning-gym seed of ``split`` for the environment's ``seed``: a hash, not ``seed`` itself.

    reasoning-gym draws item ``i`` of a dataset seeded ``s`` from ``Random(s + i)``, so datasets seeded 0
    and 1 share all but one problem (19 of 20 on ``chain_sum``, ``leg_counting``, a mix): three seeds of
    a run would train and evaluate on the same problems. Hashed, neighbouring seeds (and the two splits)
    start about 2^30 items apart. 31 bits, as some generators seed numpy's legacy ``RandomState``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    digest = hashlib.sha256(f"verifiers/reasoning-gym/{split}/{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


_RESERVED = {"seed", "size"}  # set by the environment from its own arguments


def available_datasets() -> list[str]:
    """Every dataset name reasoning-gym registers (``composite`` excluded: use a mix instead)."""
    return sorted(n for n in DATASETS if n != "composite")


def dataset_options(name: str) -> list[str]:
    """The config keys dataset ``name`` accepts (its config dataclass's fields, seed and size aside)."""
    _check_name(name)
    return [f.name for f in dataclasses.fields(DATASETS[name][1]) if f.name not in _RESERVED]


BOXED_SYSTEM_PROMPT = "Answer with the final answer only, inside \\boxed{}, e.g. \\boxed{42}. Do not explain."
"""``answer_format="boxed"``'s instructions (the arithmetic recipe's wording, which SmolLM2 follows)."""
ANSWER_FORMATS = ("answer_tags", "boxed", "number")


def read_answer(text: str) -> str | None:
    """The last ``<answer>...</answer>`` of ``text`` (markup tokens removed), as reasoning-gym reads it."""
    return extract_answer(vf.strip_markup(text))


def read_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` of ``text`` (markup tokens removed), None without one."""
    text = vf.strip_markup(text)
    return vf.extract_boxed_answer(text).strip() if "\\boxed{" in text else None


def read_number(text: str) -> str | None:
    """The number math-verify reads in ``text``: its last box's, else the last one stated in the prose
    ("so the total is 12." gives ``12``); None when it reads no number."""
    from verifiers.rubrics.math_rubric import math_parse

    boxed = read_boxed(text)
    values = math_parse(boxed if boxed is not None else vf.strip_markup(text))
    if len(values) < 2 or getattr(values[0], "is_number", isinstance(values[0], int | float)) is not True:
        return None
    return str(values[1])


READERS = {"answer_tags": read_answer, "boxed": read_boxed, "number": read_number}


def _check_name(name: Any) -> None:
    if isinstance(name, str) and name in DATASETS and name != "composite":
        return
    close = difflib.get_close_matches(str(name), available_datasets(), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(f"reasoning-gym has no dataset {name!r}{hint}; the datasets are: {', '.join(available_datasets())}")


def _check_config(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise ConfigError(f"config of {name!r} must be a table of options, got {type(config).__name__}")
    valid = dataset_options(name)
    unknown = sorted(set(config) - set(valid))
    if unknown:
        raise ConfigError(f"{name!r} has no option(s) {', '.join(map(repr, unknown))}; its options are: "
                          f"{', '.join(valid)}" + (" (seed and size are the environment's own arguments)"
                                                   if set(unknown) & _RESERVED else ""))
    return dict(config)


def mix_specs(dataset: str | Sequence[Any] | Mapping[str, float], config: Mapping[str, Any] | None) -> list[DatasetSpec]:
    """``dataset`` (a name, names, ``{name: weight}`` or ``[{"name", "weight", "config"}]``) as checked specs."""
    if isinstance(dataset, str):
        _check_name(dataset)
        return [DatasetSpec(dataset, 1.0, _check_config(dataset, config or {}))]
    if config:
        raise ConfigError("config applies to one dataset; give a mix's options per dataset: "
                          '[{"name": "chain_sum", "weight": 1, "config": {...}}, ...]')
    items = list(dataset.items()) if isinstance(dataset, Mapping) else list(dataset)
    if not items:
        raise ConfigError("dataset is an empty mix; name at least one of: " + ", ".join(available_datasets()))
    specs = []
    for item in items:
        if isinstance(item, str):
            name, weight, options = item, 1.0, {}
        elif isinstance(item, tuple) and len(item) == 2:
            (name, weight), options = item, {}
        elif isinstance(item, Mapping) and set(item) <= {"name", "weight", "config"} and "name" in item:
            name, weight, options = item["name"], item.get("weight", 1.0), item.get("config") or {}
        else:
            raise ConfigError(f"cannot read mix entry {item!r}: use a name, {{name: weight}} or "
                              '{"name": ..., "weight": ..., "config": {...}}')
        _check_name(name)
        if not isinstance(weight, int | float) or weight <= 0:
            raise ConfigError(f"the weight of {name!r} must be a positive number, got {weight!r}")
        specs.append(DatasetSpec(name, float(weight), _check_config(name, options)))
    return specs


def _generate(specs: list[DatasetSpec], size: int, seed: int) -> Any:
    try:
        if len(specs) == 1:
            return reasoning_gym.create_dataset(specs[0].name, **specs[0].config, size=size, seed=seed)
        return reasoning_gym.create_dataset("composite", datasets=specs, size=size, seed=seed)
    except (AssertionError, ValueError, TypeError) as exc:  # reasoning-gym's own config validation
        names = ", ".join(s.name for s in specs)
        raise ConfigError(f"reasoning-gym rejected the config of {names}: {exc or type(exc).__name__}") from None


def _rows(ds: Any, split: str, keep: list[int]) -> list[dict[str, Any]]:
    rows = []
    for i in keep:
        entry = ds[i]  # generated on each access: once here
        rows.append({"question": entry["question"], "answer": str(entry["answer"]),
                     "task": str(entry["metadata"].get("source_dataset", "reasoning-gym")),
                     "info": {"split": split, "index": i}})
    return rows


def load_environment(
    dataset: str | Sequence[Any] | Mapping[str, float] = "chain_sum",
    size: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    config: Mapping[str, Any] | None = None,
    prompt_style: str = "default",
    system_prompt: str | None = None,
    answer_format: str = "answer_tags",
    **kwargs: Any,
) -> vf.Environment:
    """Build the environment.

    Args:
        dataset: A reasoning-gym dataset name, or a weighted mix (``{"chain_sum": 1, "leg_counting": 2}``,
            a list of names, or ``[{"name": ..., "weight": ..., "config": {...}}]``).
        size: Training problems (0: evaluation only).
        num_eval_examples: Evaluation problems, none of them a training problem (0: none).
        seed: Seed of the training split's generator (the evaluation split's is derived from it).
        config: Options of a single dataset (`dataset_options(name)` lists them).
        prompt_style: Which of reasoning-gym's system prompts (``default``, ``simple``, ``direct``, ...).
        system_prompt: Instructions of your own instead (keep asking for the answer format's markup).
        answer_format: ``answer_tags`` (reasoning-gym's ``<answer>...</answer>``), ``boxed`` (the last
            ``\\boxed{...}``) or ``number`` (the number math-verify reads, boxed or plain; numeric datasets);
            the last two default the system prompt to `BOXED_SYSTEM_PROMPT` (``prompt_style`` unused).
        **kwargs: Passed on to ``vf.SingleTurnEnv``.
    """
    if size < 0 or num_eval_examples < 0 or size + num_eval_examples == 0:
        raise ConfigError(f"need size >= 0 and num_eval_examples >= 0, not both 0 (got {size}, {num_eval_examples})")
    if answer_format not in ANSWER_FORMATS:
        raise ConfigError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}")
    boxed = answer_format != "answer_tags"
    if system_prompt is None and not boxed and prompt_style not in SYSTEM_PROMPTS:
        raise ConfigError(f"prompt_style must be one of {', '.join(SYSTEM_PROMPTS)}, got {prompt_style!r}")
    specs = mix_specs(dataset, config)
    splits = {"train": _generate(specs, size, generator_seed(seed, "train")) if size else None}
    train_rows = _rows(splits["train"], "train", list(range(size))) if size else []
    eval_rows: list[dict[str, Any]] = []
    if num_eval_examples:
        # generated with room to spare, then every question the training split has is dropped
        spare = _generate(specs, 2 * num_eval_examples + 16, generator_seed(seed, "eval"))
        seen = {r["question"] for r in train_rows}
        keep: list[int] = []
        for i in range(len(spare)):
            if len(keep) == num_eval_examples:
                break
            q = spare[i]["question"]
            if q not in seen:
                seen.add(q)
                keep.append(i)
        if len(keep) < num_eval_examples:
            raise ConfigError(f"only {len(keep)} evaluation problems differ from the {size} training problems: the "
                              "dataset's problem space is too small for both; lower size or num_eval_examples, or "
                              "widen its config")
        splits["eval"] = spare
        eval_rows = _rows(spare, "eval", keep)

    read = READERS[answer_format]

    def reasoning_gym_score(completion: vf.Messages, info: dict[str, Any]) -> float:
        """The generating dataset's own score_answer of the reply's answer (0.0 without one)."""
        ds = splits[info["split"]]
        return float(ds.score_answer(read(vf.reply_text(completion)), ds[info["index"]]))

    def answered(completion: vf.Messages) -> float:
        """1.0 when the reply has an answer in the asked format (a metric: format, apart from being right)."""
        return float(read(vf.reply_text(completion)) is not None)

    parser = vf.Parser(extract_fn=read)
    default_prompt = BOXED_SYSTEM_PROMPT if boxed else SYSTEM_PROMPTS.get(prompt_style)
    return vf.SingleTurnEnv(
        dataset=train_rows or None,
        eval_dataset=eval_rows or None,
        system_prompt=system_prompt if system_prompt is not None else default_prompt,
        parser=parser,
        rubric=vf.Rubric(funcs=[reasoning_gym_score, answered], weights=[1.0, 0.0], parser=parser),
        **kwargs,
    )
