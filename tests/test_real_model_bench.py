"""benchmarks/real_model.py's split of pass@1 into format and arithmetic, on rollouts built by hand.

The evaluations themselves take minutes on the real model (run by hand; the figures are in
docs/models.md); what is checked here is that ``cut``, ``answered`` and ``accuracy_answered``
mean what the docs say they mean.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

import verifiers as vf


@pytest.fixture(scope="module")
def bench(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("real_model")


def reply(text: str, reward: float, cut: bool = False) -> vf.RolloutResult:
    return vf.RolloutResult(example_id=0, prompt=[{"role": "user", "content": "2 + 3"}],
                            completion=[{"role": "assistant", "content": text}], reward=reward,
                            is_truncated=cut)


def test_readable_answers_are_the_numbers_the_grader_reads(bench: Any) -> None:
    assert bench.readable_answer("So 2 + 3 = \\boxed{5}.")
    assert bench.readable_answer(" -12\n")
    assert bench.readable_answer("\\boxed{1,200}")
    # MathRubric reads prose too: the untrained model's correct answers were mostly unboxed
    assert bench.readable_answer("The answer is 5")
    assert not bench.readable_answer("First 7, then 5")  # the grader reads no single number here
    assert not bench.readable_answer("\\boxed{5")  # a box cut short
    assert not bench.readable_answer("\\boxed{five}")


def test_pass1_splits_into_answered_and_accuracy_among_answered(bench: Any) -> None:
    results = [
        reply("\\boxed{5}", 1.0),
        reply("\\boxed{6}", 0.0),
        reply("5", 1.0),
        reply("Let me think step by step about 2 + 3. First", 0.0, cut=True),
        reply("It is five.<|im_end|>", 0.0),
    ]
    figures = bench.answer_figures(results)
    assert figures == {"cut": 0.2, "answered": 0.6, "accuracy_answered": round(2 / 3, 4), "boxed": 0.4,
                       "cut_looping": 0.0, "cut_tails": ["Let me think step by step about 2 + 3. First"]}
    assert bench.answer_figures([reply("no", 0.0)])["accuracy_answered"] is None


async def test_long_evaluations_print_a_progress_line_every_interval_even_with_nothing_finished(bench: Any) -> None:
    import asyncio

    from _progress import Ticker  # real_model.py put the benchmarks' folder on sys.path

    lines: list[str] = []
    async with Ticker("sampling", 400, every_s=0.05, echo=lambda text, **_: lines.append(text)) as ticker:
        await asyncio.sleep(0.12)  # no rollout has finished: a line still comes
        ticker()
        await asyncio.sleep(0.08)
    assert lines[0].startswith("  sampling: 0/400 rollouts, ") and "time left unknown" in lines[0]
    assert lines[-1].startswith("  sampling: 1/400 rollouts, ") and "s left" in lines[-1]
    count = len(lines)
    await asyncio.sleep(0.1)
    assert len(lines) == count  # the ticker stops with the evaluation


def test_an_environment_s_own_answered_metric_decides_what_was_answered(bench: Any) -> None:
    tagged = reply("<answer>5</answer>", 1.0)
    tagged.metrics["answered"] = 1.0
    untagged = reply("5", 0.0)  # a bare number, but reasoning-gym asked for <answer> tags
    untagged.metrics["answered"] = 0.0
    assert bench.answer_figures([tagged, untagged]) == {"cut": 0.0, "answered": 0.5, "accuracy_answered": 1.0,
                                                        "boxed": 0.0, "cut_looping": None, "cut_tails": []}
    assert [kw["dataset"] for _, kw in bench.reasoning_gym_envs("chain_sum,leg_counting")] == ["chain_sum",
                                                                                                "leg_counting"]


async def test_on_a_terminal_the_progress_line_is_redrawn_in_place_and_ended_with_a_newline(bench: Any) -> None:
    import asyncio

    from _progress import Ticker

    shown: list[tuple[str, str]] = []
    ticker = Ticker("sampling", 10, every_s=30.0, echo=lambda text, end="\n", **_: shown.append((text, end)),
                    live=True)
    ticker.redraw_s = 0.02
    async with ticker:
        await asyncio.sleep(0.07)  # well under every_s: a terminal still sees the line move
        ticker()
        await asyncio.sleep(0.05)
    assert len(shown) >= 3 and all(text.startswith("\r  sampling: ") for text, _ in shown)
    assert {end for _, end in shown[:-1]} == {""} and shown[-1][1] == "\n"  # redrawn, then ended
    assert shown[-1][0].startswith("\r  sampling: 1/10 rollouts")


def test_cut_replies_that_repeat_themselves_are_told_from_those_that_needed_more_room(bench: Any) -> None:
    loop = "2 + 3 is the sum. " + "We add 2 and 3 to get the sum of 2 and 3. " * 12
    assert bench.ends_in_a_loop(loop) and bench.ends_in_a_loop("ababab" * 40 + "ab")
    assert not bench.ends_in_a_loop("Let me think step by step about 2 + 3. First, two is a number, then")
    assert not bench.ends_in_a_loop("aa")  # too short to say
    assert not bench.ends_in_a_loop("The population grew from 12,000 to 1,000,000")  # zeros, not a loop
    results = [reply(loop, 0.0, cut=True), reply("Let me think step by step about 2 + 3. First", 0.0, cut=True),
               reply("5", 1.0)]
    assert bench.answer_figures(results)["cut_looping"] == 0.5


def test_a_gain_up_to_the_constant_majority_reply_is_told_apart_from_the_task(bench: Any) -> None:
    """A letter-counting run "gained" 0.35 by answering 1 to everything: the figures must show the
    constant reply's score and pass@1 on the problems it does not solve."""
    class Env:
        dataset = SimpleNamespace(rows=[{"question": f"q{i}", "answer": a} for i, a in enumerate(["1", "1", "2", " 1", "3"])])

    assert bench.majority_answer(Env()) == "1"

    def scored(answer: str, reward: float) -> vf.RolloutResult:
        r = reply("1", reward)
        r.answer = answer
        return r

    says_one = [scored("1", 1.0), scored("1", 1.0), scored("2", 0.0), scored("3", 0.0)]
    assert bench.prior_figures(says_one, "1") == {"majority_answer": "1", "majority_pass1": 0.5,
                                                  "pass1_off_majority": 0.0}
    counts = [scored("1", 1.0), scored("1", 0.0), scored("2", 1.0), scored("3", 0.0)]
    assert bench.prior_figures(counts, "1")["pass1_off_majority"] == 0.5
    assert bench.prior_figures(counts, None) == {"majority_answer": None, "majority_pass1": None,
                                                 "pass1_off_majority": None}

    class NoAnswers:
        dataset = None

    assert bench.majority_answer(NoAnswers()) is None


def test_another_recipe_s_task_is_evaluated_and_held_to_a_gain(bench: Any, tmp_path: Any) -> None:
    """``--config RECIPE``: the recipe's environment is what the baseline and both evaluations use, and its
    target is a held-out gain (the arithmetic recipe's, however its path is spelled, an absolute pass@1)."""
    recipe = tmp_path / "legs.toml"
    recipe.write_text('model = "m"\nenv_id = "reasoning-gym"\n'
                      'env_args = { dataset = "leg_counting", answer_format = "number" }\n')
    assert bench.config_env(recipe) == ("reasoning-gym", {"dataset": "leg_counting", "answer_format": "number"})
    assert bench.config_env()[0] == "arithmetic"
    assert bench.is_default(bench.ROOT / "examples" / "configs" / ".." / "configs" / "arithmetic_smollm2.toml")
    assert not bench.is_default(recipe)
    assert bench.GAIN_TARGET == 0.2



def test_the_evaluation_engine_holds_its_kv_cache_to_the_budget(bench: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """Memory (issue 48): the evaluations' engine is built with ``--max-kv-tokens``; 0 leaves it unbounded."""
    from verifiers.inference.engine import InferenceEngine
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny", TinyModelSpec(seed=0))
    budgets: list[int] = []
    original = InferenceEngine.__init__

    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        budgets.append(self.max_kv_tokens)

    monkeypatch.setattr(InferenceEngine, "__init__", recording)
    for kv in (3000, 0):
        with bench.inprocess(model_dir, threads=1, seed=0, kv_tokens=kv):
            pass
    assert budgets[0] == 3000
    assert budgets[1] > 3000  # unbounded: max_batch_size x max_model_len
    smollm2_kv_bytes = 2 * 30 * 3 * 64 * 4  # keys and values, 30 layers, 3 KV heads of 64, float32
    assert bench.KV_TOKENS * smollm2_kv_bytes < 2 * 2**30  # the default keeps its evaluations' cache under 2 GB


async def test_the_evaluation_samples_at_the_asked_temperature_and_nucleus(bench: Any, tmp_path: Any,
                                                                           monkeypatch: Any) -> None:
    """``--temperature`` / ``--top-p`` reach the engine's sampler for the sampled replies, never the greedy
    ones (issue 47: the untrained model is evaluated at top-p 0.9, where it ends its replies)."""
    from verifiers.inference.engine import InferenceEngine
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny", TinyModelSpec(seed=0))
    asked: list[tuple[float, float]] = []
    original = InferenceEngine.generate

    async def recording(self: Any, prompt_ids: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append((params.temperature, params.top_p))
        return await original(self, prompt_ids, params, *args, **kwargs)

    monkeypatch.setattr(InferenceEngine, "generate", recording)
    env = bench.load_env("arithmetic", {"num_train_examples": 8, "num_eval_examples": 4})
    with bench.inprocess(model_dir, threads=1, seed=0, kv_tokens=4000) as client:
        figures = await bench.evaluate(client, env, 3, 2, 8, 4, temperature=0.7, top_p=0.9)
    assert figures["n"] == 6
    assert set(asked) == {(0.7, 0.9), (0.0, 1.0)}


def test_copying_a_number_of_the_question_is_a_floor_the_gain_must_clear(bench: Any) -> None:
    """A choice task's answer is one of the question's numbers: copying the last one scores without skill."""
    def asked(question: str, answer: str, reward: float) -> vf.RolloutResult:
        return vf.RolloutResult(example_id=0, prompt=[{"role": "system", "content": "Answer 7."},
                                                      {"role": "user", "content": question}],
                                completion=[{"role": "assistant", "content": answer}], answer=answer, reward=reward)

    pick = "pick the largest number of the following candidates: {} {}"
    results = [asked(pick.format("569,204,305.6", "569,204,311.663"), "569204311.663", 1.0),
               asked(pick.format("569,204,305.6", "569,204,311.663"), "569204311.663", 1.0),  # a second sample
               asked(pick.format("12.5", "3.0"), "12.5", 0.0),
               asked(pick.format("1,000", "999"), "1000", 0.0),
               asked("no number here", "4", 0.0)]
    # four problems: the first number is right on two, the last on one; the system prompt's 7 is not the question
    assert bench.echo_figures(results) == {"echo_first_pass1": 0.5, "echo_last_pass1": 0.25, "echo_pass1": 0.5}
    assert bench.echo_figures([])["echo_pass1"] is None
