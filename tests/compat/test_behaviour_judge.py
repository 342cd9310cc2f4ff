"""0.1.x judge environments: reward functions that call ``rubric.judge_client`` themselves.

Written the way published 0.1.x environments are: a `JudgeRubric` built with an
``openai.AsyncOpenAI``, a reward function that awaits
``rubric.judge_client.chat.completions.create(...)`` (or ``rubric.judge(...)``), and a
sync ``env.evaluate``. The policy and the judge are two `ScriptedServer`s on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from datasets import Dataset
from openai import AsyncOpenAI, OpenAI

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript


@pytest.fixture
def policy() -> Iterator[ScriptedServer]:
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="Paris is the capital.")])) as srv:
        yield srv


@pytest.fixture
def judge_server() -> Iterator[ScriptedServer]:
    script = ServerScript(
        replies=[ScriptedReply(content="yes", match="Paris"), ScriptedReply(content="no")]
    )
    with ScriptedServer(script) as srv:
        yield srv


def load_environment(judge_base_url: str, **kwargs) -> vf.Environment:
    """A 0.1.x-style judge environment (the shape of many published ones)."""
    dataset = Dataset.from_list(
        [
            {"question": "What is the capital of France?", "answer": "Paris"},
            {"question": "What is the capital of Spain?", "answer": "Madrid"},
        ]
    )
    judge_client = AsyncOpenAI(base_url=judge_base_url, api_key="judge-key")
    rubric = vf.JudgeRubric(
        judge_client=judge_client,
        judge_model="judge-model",
        judge_sampling_args={"max_tokens": 7, "temperature": 0.0},
        judge_prompt="Q: {question}\nGold: {answer}\nSaid: {response}\nReply {{yes}} or {{no}}.",
    )

    async def judge_by_hand(prompt, completion, answer, state) -> float:
        # Published environments call the raw SDK client themselves.
        response = await rubric.judge_client.chat.completions.create(
            model=rubric.judge_model,
            messages=[{"role": "user", "content": f"Is '{completion[-1]['content']}' about {answer}?"}],
        )
        return 1.0 if "yes" in response.choices[0].message.content else 0.0

    async def judge_builtin(prompt, completion, answer, state) -> float:
        verdict = await rubric.judge(prompt, completion, answer, state)
        return 1.0 if verdict.strip().lower().startswith("yes") else 0.0

    rubric.add_reward_func(judge_by_hand, weight=1.0)
    rubric.add_reward_func(judge_builtin, weight=0.5)
    return vf.SingleTurnEnv(dataset=dataset, rubric=rubric, **kwargs)


def test_reward_function_calls_raw_judge_client(policy: ScriptedServer, judge_server: ScriptedServer) -> None:
    env = load_environment(judge_server.base_url)
    assert isinstance(env.rubric.judge_client, AsyncOpenAI)  # the client given, not a wrapper
    out = env.evaluate(AsyncOpenAI(base_url=policy.base_url, api_key="k"), "policy", num_examples=2)
    assert [r.error for r in out.results] == [None, None]
    assert [r.scoring_errors for r in out.results] == [[], []]
    # The scripted judge says "yes" when its request mentions Paris; both requests quote
    # the completion ("Paris is the capital."), so both functions score 1 on both rows.
    assert out.metrics["judge_by_hand"] == [1.0, 1.0]
    assert out.metrics["judge_builtin"] == [1.0, 1.0]
    assert out.reward == [1.5, 1.5]


def test_judge_prompt_format_and_sampling_args_as_0_1(policy: ScriptedServer, judge_server: ScriptedServer) -> None:
    env = load_environment(judge_server.base_url)
    env.evaluate(AsyncOpenAI(base_url=policy.base_url, api_key="k"), "policy", num_examples=1)
    builtin = [r for r in judge_server.requests if r["messages"][0]["content"].startswith("Q: ")]
    assert len(builtin) == 1
    req = builtin[0]
    # str.format: placeholders filled from the last prompt message, {{ }} unescaped.
    assert req["messages"][0]["content"] == (
        "Q: What is the capital of France?\nGold: Paris\nSaid: Paris is the capital.\nReply {yes} or {no}."
    )
    assert req["model"] == "judge-model"
    assert req["max_completion_tokens"] == 7 and "max_tokens" not in req  # renamed as 0.1.x did
    assert req["temperature"] == 0.0


def test_judge_verdict_cached_in_state_and_sync_client(policy: ScriptedServer, judge_server: ScriptedServer) -> None:
    # A synchronous OpenAI client as judge also works for our own judge path.
    rubric = vf.JudgeRubric(judge_client=OpenAI(base_url=judge_server.base_url, api_key="k"))

    async def twice(prompt, completion, answer, state) -> float:
        a = await rubric.judge(prompt, completion, answer, state)
        b = await rubric.judge(prompt, completion, answer, state)
        return float(a == b == "yes")

    rubric.add_reward_func(twice)
    env = vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "capital?", "answer": "Paris"}]), rubric=rubric)
    out = env.evaluate(AsyncOpenAI(base_url=policy.base_url, api_key="k"), "policy")
    assert out.reward == [1.0]
    assert judge_server.n_requests == 1  # the second call was answered from state["judge_response"]
    assert list(out.state[0]["judge_response"].values()) == ["yes"]


def test_judge_failure_is_a_visible_error(policy: ScriptedServer) -> None:
    dead = ScriptedServer(ServerScript(fail_first=100, fail_first_status=400)).start()
    try:
        rubric = vf.JudgeRubric(judge_client=AsyncOpenAI(base_url=dead.base_url, api_key="k", max_retries=0))

        async def uses_judge(prompt, completion, answer, state) -> float:
            return float("yes" in await rubric.judge(prompt, completion, answer, state))

        rubric.add_reward_func(uses_judge)
        env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}], rubric=rubric)
        out = env.evaluate(AsyncOpenAI(base_url=policy.base_url, api_key="k"), "policy")
    finally:
        dead.stop()
    assert out.reward == [0.0]
    (err,) = out.results[0].scoring_errors
    assert err.type == "JudgeError" and err.where == "reward:uses_judge"
