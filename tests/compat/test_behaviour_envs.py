"""0.1.x environments: extra kwargs, MultiTurnEnv games, state, generate/evaluate shapes, datasets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from datasets import Dataset
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.compat.env_adapters import GenerateInputs
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


@pytest.fixture
def echo() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


def correct(completion, answer) -> float:
    return 1.0 if completion[-1]["content"] == answer else 0.0


def qa_rows() -> Dataset:
    return Dataset.from_list(
        [{"question": q, "answer": a, "info": {"n": i}} for i, (q, a) in enumerate([("a", "a"), ("b", "x"), ("c", "c")])]
    )


class GuessEnv(vf.MultiTurnEnv):
    """A 0.1.x number-guessing game: no max_turns given, ends when the model says the secret."""

    def __init__(self, secret: str, **kwargs):
        super().__init__(**kwargs)
        self.secret = secret

    async def setup_state(self, state, **kwargs):
        state["guesses"] = 0
        return state

    async def is_completed(self, messages, state, **kwargs) -> bool:
        return state.get("won", False) or await self.max_turns_reached(state)

    async def env_response(self, messages, state, **kwargs):
        state["guesses"] += 1
        guess = messages[-1]["content"]
        if guess == self.secret:
            state["won"] = True
            return [{"role": "user", "content": "correct!"}], state
        return [{"role": "user", "content": "higher"}], state


def won(state) -> float:
    return 1.0 if state.get("won") else 0.0


def test_multiturn_game_with_default_max_turns(echo: ScriptedServer) -> None:
    # The model's guesses are "0", "1", "2", "3" ({turn} = assistant messages so far); the secret is "3".
    echo.set_script(ServerScript(replies=[ScriptedReply(content="{turn}")]))
    env = GuessEnv(secret="3", dataset=Dataset.from_list([{"question": "guess"}]), rubric=vf.Rubric(funcs=[won]))
    assert env.max_turns == -1
    out = env.evaluate(AsyncOpenAI(base_url=echo.base_url, api_key="k"), "m")
    r = out.results[0]
    assert out.reward == [1.0]
    assert [m["content"] for m in r.completion] == ["0", "higher", "1", "higher", "2", "higher", "3", "correct!"]
    state = out.state[0]
    assert state["guesses"] == 4 and state["turn"] == 4
    assert len(state["responses"]) == 4
    assert state["responses"][-1].choices[0].message.content == "3"
    assert set(state["timing"]) == {"generation_ms", "scoring_ms", "total_ms"}
    assert state["timing"]["generation_ms"] > 0
    assert state["id"] == 0


def test_max_turns_ends_without_env_response(echo: ScriptedServer) -> None:
    echo.set_script(ServerScript(replies=[ScriptedReply(content="{turn}")]))
    env = GuessEnv(secret="never", dataset=[{"question": "guess"}], max_turns=2)
    out = env.evaluate(AsyncOpenAI(base_url=echo.base_url, api_key="k"), "m")
    state = out.state[0]
    assert [m["role"] for m in out.completion[0]] == ["assistant", "user", "assistant"]
    assert state["guesses"] == 1 and out.results[0].stop_reason == "max_turns"
    assert await_sync(env.max_turns_reached(state)) is True


def await_sync(coro):
    import asyncio

    return asyncio.run(coro)


def test_extra_kwargs_are_attributes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        env = vf.SingleTurnEnv(
            dataset=qa_rows(), difficulty="hard", max_workers=8, rollout="shadowed", get_dataset=1
        )
    assert env.difficulty == "hard" and env.max_workers == 8
    assert callable(env.rollout) and callable(env.get_dataset)  # our methods are not overwritten
    assert "get_dataset" in caplog.text and "rollout" in caplog.text


def test_sampling_args_defaults_as_0_1() -> None:
    env = vf.SingleTurnEnv(dataset=qa_rows(), sampling_args={"temperature": 0.3, "extra_body": {"top_k": 5}})
    assert env.sampling_args == {"n": 1, "extra_body": {"top_k": 5}, "temperature": 0.3}
    assert vf.SingleTurnEnv(dataset=qa_rows()).sampling_args == {"n": 1, "extra_body": {}}


def test_get_dataset_is_a_hf_dataset_with_0_1_columns() -> None:
    env = vf.SingleTurnEnv(dataset=qa_rows(), system_prompt="Be brief.")
    ds = env.get_dataset()
    assert isinstance(ds, Dataset)
    assert {"prompt", "answer", "info", "task", "example_id", "id"} <= set(ds.column_names)
    assert ds[0]["prompt"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"}]
    assert list(ds["example_id"]) == [0, 1, 2]
    assert len(env.get_dataset(n=2)) == 2
    assert isinstance(env.get_eval_dataset(n=1), Dataset)  # falls back to the train split
    assert sorted(env.get_dataset(n=-1, seed=3)["answer"]) == ["a", "c", "x"]


def test_evaluate_order_is_the_dataset_repeated(echo: ScriptedServer) -> None:
    env = vf.SingleTurnEnv(dataset=qa_rows(), rubric=vf.Rubric(funcs=[correct]))
    out = env.evaluate(AsyncOpenAI(base_url=echo.base_url, api_key="k"), "m", None, -1, 2)
    assert out.answer == ["a", "x", "c", "a", "x", "c"]
    assert out.reward == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert out.info == [{"n": 0}, {"n": 1}, {"n": 2}] * 2
    ds = env.make_dataset(out, rollouts_per_example=2, state_columns=["turn"])
    assert isinstance(ds, Dataset)
    assert ds["reward"] == out.reward and ds["turn"] == [1] * 6
    assert "correct" in ds.column_names and "info" in ds.column_names
    with pytest.raises(vf.ConfigError):
        env.make_dataset(out, push_to_hub=True)


@pytest.mark.parametrize("kind", ["GenerateInputs", "Dataset", "dict"])
def test_generate_inputs_shapes_and_positional_sampling_args(echo: ScriptedServer, kind: str) -> None:
    env = vf.SingleTurnEnv(dataset=qa_rows(), rubric=vf.Rubric(funcs=[correct]))
    prompts = [[{"role": "user", "content": "p1"}], [{"role": "user", "content": "p2"}]]
    columns = {"prompt": prompts, "answer": ["p1", "no"], "info": [{}, {"k": 1}], "task": ["t", "t"]}
    inputs = {"GenerateInputs": GenerateInputs(**columns), "Dataset": Dataset.from_dict(columns), "dict": columns}[kind]
    out = env.generate(inputs, AsyncOpenAI(base_url=echo.base_url, api_key="k"), "m", {"max_tokens": 50})
    assert out.reward == [1.0, 0.0]
    assert out.task == ["t", "t"]
    assert out.info[1] == {"k": 1}
    assert echo.requests[-1]["max_tokens"] == 50 and echo.requests[-1]["n"] == 1
