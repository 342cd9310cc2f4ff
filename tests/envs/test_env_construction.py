"""Environment construction: datasets, prompt formatting, configuration errors."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

import verifiers as vf
from verifiers.testing import ScriptedServer

FEW_SHOT = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
]


def test_dataset_as_list_of_dicts_builds_chat_prompt_with_system_and_few_shot() -> None:
    env = vf.SingleTurnEnv(
        dataset=[{"question": "What is 1+1?", "answer": "2"}],
        system_prompt="Be brief.",
        few_shot=FEW_SHOT,
    )
    row = env.dataset[0]
    assert row["prompt"] == [
        {"role": "system", "content": "Be brief."},
        *FEW_SHOT,
        {"role": "user", "content": "What is 1+1?"},
    ]
    assert row["answer"] == "2"
    assert row["task"] == "default"
    assert row["info"] == {}
    assert row["example_id"] == 0


def test_dataset_as_hf_dataset() -> None:
    ds = Dataset.from_list([{"question": f"q{i}", "answer": str(i)} for i in range(4)])
    env = vf.SingleTurnEnv(dataset=ds, system_prompt="sys")
    assert len(env.dataset) == 4
    assert [r["prompt"][-1]["content"] for r in env.dataset] == ["q0", "q1", "q2", "q3"]
    assert [r["prompt"][0] for r in env.dataset] == [{"role": "system", "content": "sys"}] * 4
    assert [r["example_id"] for r in env.dataset] == [0, 1, 2, 3]
    assert env.dataset["answer"] == ["0", "1", "2", "3"]


def test_no_system_prompt_means_only_the_user_message() -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": "hi"}])
    assert env.dataset[0]["prompt"] == [{"role": "user", "content": "hi"}]
    assert env.dataset[0]["answer"] == ""


def test_prompt_column_of_messages_is_used_as_is() -> None:
    prompt = [
        {"role": "system", "content": "custom system"},
        {"role": "user", "content": "custom user"},
    ]
    env = vf.SingleTurnEnv(
        dataset=[{"prompt": prompt, "answer": "a"}], system_prompt="IGNORED", few_shot=FEW_SHOT
    )
    assert env.dataset[0]["prompt"] == prompt


def test_prompt_column_from_hf_dataset_drops_arrow_none_fields() -> None:
    # Arrow stores messages as structs with the union of keys; missing ones come back as None.
    ds = Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "user", "content": "hi", "name": "bob"},
                ]
            },
            {"prompt": [{"role": "user", "content": "yo", "name": None}]},
        ]
    )
    env = vf.SingleTurnEnv(dataset=ds)
    assert env.dataset[1]["prompt"] == [{"role": "user", "content": "yo"}]


def test_info_as_json_string_is_parsed() -> None:
    env = vf.SingleTurnEnv(
        dataset=[
            {"question": "q", "info": json.dumps({"difficulty": 3, "tags": ["x"]})},
            {"question": "q2", "info": {"already": "dict"}},
            {"question": "q3", "info": ""},
        ]
    )
    assert env.dataset[0]["info"] == {"difficulty": 3, "tags": ["x"]}
    assert env.dataset[1]["info"] == {"already": "dict"}
    assert env.dataset[2]["info"] == {}


def test_info_that_is_not_a_json_object_is_a_config_error() -> None:
    with pytest.raises(vf.ConfigError, match="info"):
        vf.SingleTurnEnv(dataset=[{"question": "q", "info": "not json {"}])
    with pytest.raises(vf.ConfigError, match="info"):
        vf.SingleTurnEnv(dataset=[{"question": "q", "info": "[1, 2]"}])


def test_missing_dataset_is_a_helpful_config_error() -> None:
    with pytest.raises(vf.ConfigError) as ei:
        vf.SingleTurnEnv(system_prompt="x")
    msg = str(ei.value)
    assert "dataset=" in msg and "eval_dataset=" in msg
    # ConfigError is also a ValueError, so generic handlers catch it.
    assert isinstance(ei.value, ValueError)


def test_eval_dataset_only_is_enough_and_evaluate_uses_it() -> None:
    env = vf.SingleTurnEnv(eval_dataset=[{"question": "q"}])
    assert env.dataset is None
    assert len(env.get_eval_dataset()) == 1
    with pytest.raises(vf.ConfigError, match="no training dataset"):
        env.get_dataset()


def test_row_without_prompt_or_question_names_the_columns() -> None:
    with pytest.raises(vf.ConfigError) as ei:
        vf.SingleTurnEnv(dataset=[{"question": "ok"}, {"text": "oops", "answer": "1"}])
    msg = str(ei.value)
    assert "row 1" in msg
    assert "'prompt'" in msg and "'question'" in msg
    assert "text" in msg and "answer" in msg  # the columns that are there


def test_empty_dataset_is_a_config_error() -> None:
    with pytest.raises(vf.ConfigError, match="empty"):
        vf.SingleTurnEnv(dataset=[])


def test_bad_message_type_is_a_config_error() -> None:
    with pytest.raises(vf.ConfigError, match="message_type"):
        vf.SingleTurnEnv(dataset=[{"question": "q"}], message_type="tokens")  # type: ignore[arg-type]


async def test_string_prompt_in_chat_mode_warns_and_its_rollout_is_refused(
    caplog: pytest.LogCaptureFixture, server: ScriptedServer, client
) -> None:
    """Built with a warning naming the row and the fix (0.1.x built it too); no request is sent for it."""
    with caplog.at_level("WARNING"):
        env = vf.SingleTurnEnv(dataset=[{"prompt": "raw text"}, {"question": "fine"}])
    assert "dataset row 0: 'prompt' is a string but message_type is 'chat'" in caplog.text
    assert "1 of 2 rows" in caplog.text
    out = await env.a_evaluate(client, "m")
    assert [r.error.type if r.error else None for r in out.results] == ["ConfigError", None]
    assert server.n_requests == 1
    with pytest.raises(vf.ConfigError, match="'prompt' is a string but message_type is 'chat'"):
        await env.a_generate([{"prompt": "raw text"}], client, "m")  # generate's own inputs: at once


def test_completion_mode_question_is_the_prompt() -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": "Continue this", "answer": "x"}], message_type="completion")
    assert env.dataset[0]["prompt"] == "Continue this"


@pytest.mark.parametrize("extra", [{"system_prompt": "SYS"}, {"few_shot": FEW_SHOT}])
def test_system_prompt_or_few_shot_in_completion_mode_is_refused(extra: dict) -> None:
    """A text prompt has no roles: joining them to the question would guess a format (0.1.5 refused too)."""
    with pytest.raises(vf.ConfigError, match=r'not supported for completion tasks.*pre-format your dataset'):
        vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "x"}], message_type="completion", **extra)


async def test_completion_mode_uses_v1_completions(server: ScriptedServer, client) -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": "Once upon", "answer": ""}], message_type="completion")
    out = await env.a_evaluate(client, "m")
    assert server.n_requests == 1
    body = server.requests[-1]
    assert "prompt" in body and "messages" not in body  # the /v1/completions shape
    assert body["prompt"] == "Once upon"
    assert isinstance(out.completion[0], str)
    assert out.error == [None]
    assert out.stop_reason == ["completed"]


def test_env_dataset_behaves_like_hf_dataset() -> None:
    env = vf.SingleTurnEnv(
        dataset=[{"question": f"q{i}", "answer": str(i), "info": {"k": i}} for i in range(5)],
    )
    ds = env.dataset
    assert len(ds) == 5
    assert {"prompt", "answer", "task", "info", "example_id", "question"} <= set(ds.column_names)
    # `.select` is not defined by verifiers: it falls through to a real HF Dataset.
    sub = ds.select([1, 3])
    assert isinstance(sub, Dataset)
    assert len(sub) == 2
    assert sub["answer"] == ["1", "3"]
    # Such a subset can be handed back to generate/evaluate-style APIs as inputs.
    assert env.get_dataset(n=2)["answer"] == ["0", "1"]


async def test_hf_subset_of_env_dataset_can_be_generated(server: ScriptedServer, client) -> None:
    env = vf.SingleTurnEnv(
        dataset=[{"question": f"q{i}", "answer": f"q{i}", "info": {"k": i}} for i in range(5)],
    )
    sub = env.dataset.select([2, 4])
    out = await env.a_generate(sub, client, "m")
    assert [c[-1]["content"] for c in out.completion] == ["q2", "q4"]
    assert out.info == [{"k": 2}, {"k": 4}]  # info went through JSON in Arrow and came back a dict


def test_get_dataset_with_seed_shuffles_deterministically() -> None:
    env = vf.SingleTurnEnv(dataset=[{"question": f"q{i}"} for i in range(20)])
    a = env.get_dataset(n=5, seed=1)["question"]
    b = env.get_dataset(n=5, seed=1)["question"]
    assert a == b
    assert len(a) == 5


def test_unknown_kwargs_are_tolerated() -> None:
    # 0.1.x environments pass legacy arguments to the base class.
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}], max_workers=4, env_id="my-env")
    assert env.env_id == "my-env"
