"""The Environment methods 0.1.x authors call and override, written from verifiers 0.1.5's source
(``envs/environment.py``, ``envs/multiturn_env.py``, ``envs/singleturn_env.py``; the non-vLLM
``process_chat_format`` / ``process_completion_format`` / ``process_env_results`` from 0.1.2,
the last release that had them). Real HTTP against `ScriptedServer` where a server answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest
from openai.types.chat import ChatCompletion
from openai.types.completion import Completion

import verifiers as vf
from verifiers.testing import ScriptedServer, ServerScript
from verifiers.testing.script import ScriptedReply
from verifiers.utils.message_utils import get_overlong_prompt_dummy_response

ROWS = [{"question": "alpha", "answer": "alpha"}, {"question": "beta", "answer": "beta"}]


def echo_reward(completion, answer) -> float:
    return 1.0 if completion[-1]["content"] == answer else 0.0


def single(**kw: Any) -> vf.SingleTurnEnv:
    return vf.SingleTurnEnv(dataset=[dict(r) for r in ROWS], rubric=vf.Rubric(funcs=[echo_reward]), **kw)


class Counter(vf.MultiTurnEnv):
    """A 0.1.x multi-turn environment: answers every turn, reads 0.1.5's state keys."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(dataset=[dict(ROWS[0])], rubric=vf.Rubric(funcs=[]), **kw)
        self.seen: list[dict[str, Any]] = []

    async def is_completed(self, messages, state, **kwargs) -> bool:
        self.seen.append({k: state[k] for k in ("turn", "answer", "task", "info")} | {"n_responses": len(state["responses"])})
        if state["responses"] and state["responses"][-1].choices[0].message.content == "stop":
            return True
        return await self.max_turns_reached(state)

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": f"turn {state['turn']}"}], state


# -- get_model_response ---------------------------------------------------------------------------


async def test_get_model_response_returns_the_sdk_object(server: ScriptedServer, client) -> None:
    env = single()
    chat = await env.get_model_response(client, "m", [{"role": "user", "content": "hello"}])
    assert isinstance(chat, ChatCompletion) and chat.choices[0].message.content == "hello"
    text = await env.get_model_response(client, "m", "hello", message_type="completion")
    assert isinstance(text, Completion) and isinstance(text.choices[0].text, str)


async def test_get_model_response_refuses_tools_in_completion_mode(client) -> None:
    with pytest.raises(ValueError, match="oai_tools are not supported for completion tasks"):
        await single().get_model_response(client, "m", "2+2", oai_tools=[{"type": "function"}], message_type="completion")


async def test_get_model_response_sends_0_1_5_arguments() -> None:
    client = AsyncMock()
    client.chat.completions.create.return_value = ChatCompletion.model_validate(
        {"id": "x", "created": 0, "model": "m", "object": "chat.completion",
         "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]}
    )
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]
    args = {"max_tokens": 7, "temperature": None, "top_p": 0.9}
    await single().get_model_response(client, "m", audio, sampling_args=args)
    kwargs = client.chat.completions.create.call_args.kwargs
    assert kwargs["max_completion_tokens"] == 7 and "max_tokens" not in kwargs and "temperature" not in kwargs
    assert kwargs["modalities"] == ["text"]  # audio in, text out unless the caller chose
    assert args == {"max_tokens": 7, "temperature": None, "top_p": 0.9}  # the caller's dict is left alone
    await single().get_model_response(client, "m", audio, sampling_args={"modalities": ["text", "audio"]})
    assert client.chat.completions.create.call_args.kwargs["modalities"] == ["text", "audio"]


async def test_overlong_prompt_gives_the_placeholder(make_server) -> None:
    server = make_server(ServerScript(context_length=5))
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    response = await single().get_model_response(client, "m", [{"role": "user", "content": "far too long a prompt"}])
    assert response.id == "overlong-prompt" and response.choices[0].finish_reason == "length"


async def test_an_override_is_called_with_0_1_5_arguments_and_its_sdk_object_used(server: ScriptedServer, client) -> None:
    seen: list[dict[str, Any]] = []

    class Wrapped(vf.SingleTurnEnv):
        async def get_model_response(self, client, model, prompt, oai_tools=None, sampling_args=None,
                                     message_type=None, **kwargs):
            seen.append({"message_type": message_type, "initial_prompt": kwargs.get("initial_prompt"),
                         "sampling_args": dict(sampling_args or {})})
            response = await client.chat.completions.create(model=model, messages=prompt)
            response.choices[0].message.content = response.choices[0].message.content.upper()
            return response

    env = Wrapped(dataset=[dict(ROWS[0])], rubric=vf.Rubric(funcs=[echo_reward]), sampling_args={"temperature": 0.2})
    out = await env.a_generate(env.dataset, client, "m")
    assert out.completion[0][-1]["content"] == "ALPHA"
    assert seen == [{"message_type": "chat", "initial_prompt": True, "sampling_args": {"n": 1, "extra_body": {}, "temperature": 0.2}}]


async def test_an_override_returning_the_placeholder_ends_the_rollout(client) -> None:
    class TooLong(vf.SingleTurnEnv):
        async def get_model_response(self, *args, **kwargs):
            return get_overlong_prompt_dummy_response("chat")

    env = TooLong(dataset=[dict(ROWS[0])], rubric=vf.Rubric(funcs=[]))
    out = await env.a_generate(env.dataset, client, "m")
    assert out.state[0]["prompt_too_long"] is True and out.results[0].stop_reason == "prompt_too_long"
    assert out.completion[0] == []


# -- run_rollouts, a_generate -------------------------------------------------------------------------


async def test_run_rollouts_returns_completion_state_pairs_in_order(make_server) -> None:
    server = make_server(ServerScript(latency_s=0.1))
    import openai

    class InFlight(vf.SingleTurnEnv):
        now = peak = 0

        async def rollout(self, *args, **kwargs):
            InFlight.now += 1
            InFlight.peak = max(InFlight.peak, InFlight.now)
            try:
                return await super().rollout(*args, **kwargs)
            finally:
                InFlight.now -= 1

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    env = InFlight(dataset=[dict(r) for r in ROWS], rubric=vf.Rubric(funcs=[echo_reward]))
    prompts = [[{"role": "user", "content": w}] for w in ("a", "b", "c", "d")]
    pairs = await env.run_rollouts(client, "m", prompts, ["a", "b", "c", "d"], ["t"] * 4, [{}] * 4, max_concurrent=2)
    assert [c[-1]["content"] for c, _ in pairs] == ["a", "b", "c", "d"]
    assert [s["answer"] for _, s in pairs] == ["a", "b", "c", "d"] and pairs[0][1]["task"] == "t"
    assert InFlight.peak == 2 and server.n_requests == 4


async def test_a_generate_goes_through_an_overridden_run_rollouts_when_not_interleaved(client) -> None:
    calls = []

    class Logged(vf.SingleTurnEnv):
        async def run_rollouts(self, client, model, prompts, answers, tasks, infos, sampling_args=None,
                               max_concurrent=-1, **kwargs):
            calls.append(len(prompts))
            return await super().run_rollouts(client, model, prompts, answers, tasks, infos, sampling_args,
                                              max_concurrent, **kwargs)

    env = Logged(dataset=[dict(r) for r in ROWS], rubric=vf.Rubric(funcs=[echo_reward]))
    out = await env.a_generate(env.dataset, client, "m", interleave_scoring=False)
    assert calls == [2] and out.reward == [1.0, 1.0] and out.metrics == {"echo_reward": [1.0, 1.0]}
    out = await env.a_generate(env.dataset, client, "m", score_rollouts=False)
    assert calls == [2, 2] and out.reward == [] and out.metrics == {}
    assert [c[-1]["content"] for c in out.completion] == ["alpha", "beta"]


# -- state keys, turns, max_turns ---------------------------------------------------------------------


async def test_state_keys_and_turn_counting_as_0_1_5(server: ScriptedServer, client) -> None:
    env = Counter(max_turns=3)
    out = await env.a_generate(env.dataset, client, "m")
    state = out.state[0]
    for key in ("prompt", "completion", "answer", "task", "info", "responses", "turn", "timing"):
        assert key in state, key
    assert set(state["timing"]) >= {"generation_ms", "scoring_ms", "total_ms"}
    # is_completed sees turn 0 before the first call, then the count after each model reply
    assert [s["turn"] for s in env.seen] == [0, 1, 1, 2, 2, 3]
    assert [s["n_responses"] for s in env.seen] == [0, 1, 1, 2, 2, 3]
    assert state["turn"] == 3 and server.n_requests == 3
    assert [m["role"] for m in out.completion[0]] == ["assistant", "user", "assistant", "user", "assistant"]
    assert out.results[0].stop_reason == "max_turns"


async def test_is_completed_override_reading_responses_ends_the_episode(make_server) -> None:
    server = make_server(ServerScript(replies=[ScriptedReply(content="go on", turn=0), ScriptedReply(content="stop")]))
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    env = Counter(max_turns=10)
    out = await env.a_generate(env.dataset, client, "m")
    assert out.state[0]["turn"] == 2 and out.results[0].stop_reason == "completed"


def test_single_turn_env_response_is_0_1_5s() -> None:
    state = {"turn": 1}
    messages, returned = asyncio.run(single().env_response([], state))
    assert messages == [{"role": "user", "content": ""}] and returned is state


async def test_completion_mode_with_chat_prompts_warns_then_refuses_the_rollout(
    caplog: pytest.LogCaptureFixture, client
) -> None:
    """0.1.5 built the environment (its own tests do, to check process_env_results) and failed with an
    AssertionError in the rollout: a warning naming the fix when built, a ConfigError per rollout here."""
    chat_rows = [{"prompt": [{"role": "user", "content": "hi"}], "answer": "x"}]
    with caplog.at_level("WARNING"):
        env = vf.SingleTurnEnv(dataset=chat_rows, message_type="completion", rubric=vf.Rubric(funcs=[]))
    assert "dataset row 0: 'prompt' must be a string when message_type is 'completion'" in caplog.text
    assert "use message_type='chat'" in caplog.text
    out = await env.a_evaluate(client, "m")
    assert out.results[0].error.type == "ConfigError" and "message_type='completion'" in out.results[0].error.message
    # inputs given to generate are checked at once (nothing was built with them)
    with pytest.raises(ValueError, match="must be a string when message_type is 'completion'"):
        await env.a_generate(chat_rows, client, "m")


# -- parsing responses and training rows --------------------------------------------------------------


def vllm_chat(content: str, ids: list[int], logprobs: list[float]) -> ChatCompletion:
    """A vLLM chat response with ``return_tokens_as_token_ids`` (what 0.1.5's trainer requested)."""
    return ChatCompletion.model_validate({
        "id": "c", "created": 0, "model": "m", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content},
                     "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": lp, "bytes": None,
                                               "top_logprobs": []} for i, lp in zip(ids, logprobs, strict=True)]}}],
    })


def test_parse_chat_completion_tokens_and_logprobs() -> None:
    env = single()
    response = vllm_chat("hi", [17, 23], [-0.5, -1.25])
    assert env.parse_chat_completion_tokens(response) == [17, 23]
    assert env.parse_chat_completion_logprobs(response) == [-0.5, -1.25]
    no_logprobs = ChatCompletion.model_validate({
        "id": "c", "created": 0, "model": "m", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}],
    })
    with pytest.raises(vf.VFError, match="logprobs"):
        env.parse_chat_completion_tokens(no_logprobs)


def test_parse_completion_tokens_and_logprobs() -> None:
    response = Completion.model_validate({
        "id": "c", "created": 0, "model": "m", "object": "text_completion",
        "choices": [{"index": 0, "text": "ab", "finish_reason": "stop",
                     "logprobs": {"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.1, -0.2]}}],
    })
    env = single()
    assert env.parse_completion_tokens(response) == [5, 6]
    assert env.parse_completion_logprobs(response) == [-0.1, -0.2]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from verifiers.models.tiny import build_char_tokenizer

    return build_char_tokenizer()


def encode_turns(tok: Any, *texts: str) -> list[int]:
    return [i for t in texts for i in tok.encode(t, add_special_tokens=False)]


def test_process_chat_format_re_tokenises_prefix_by_prefix(tokenizer: Any) -> None:
    prompt = [{"role": "user", "content": "hi"}]
    completion = [{"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"},
                  {"role": "assistant", "content": "ok"}]
    env = single()
    prompt_ids, prompt_mask, ids, mask = env.process_chat_format(prompt, completion, tokenizer, mask_env_responses=True)
    assert tokenizer.decode(prompt_ids) == tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert prompt_mask == [0] * len(prompt_ids)
    full = tokenizer.apply_chat_template(prompt + completion, tokenize=False)
    assert tokenizer.decode(prompt_ids + ids) == full
    # the user turn between the two assistant turns is masked; the assistant turns are not
    user_turn = encode_turns(tokenizer, "<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")
    first = len(encode_turns(tokenizer, "yo<|im_end|>\n"))
    assert mask[:first] == [1] * first and 0 in mask
    assert sum(1 for m in mask if m == 0) == len(user_turn) - len(encode_turns(tokenizer, "<|im_start|>assistant\n"))


def test_process_chat_format_vllm_uses_the_sampled_ids(tokenizer: Any) -> None:
    prompt = [{"role": "user", "content": "hi"}]
    completion = [{"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"},
                  {"role": "assistant", "content": "ok"}]
    state = {"responses": [vllm_chat("yo", [101, 102], [-0.1, -0.2]), vllm_chat("ok", [103], [-0.3])]}
    env = single()
    _, _, ids, mask, logprobs = env.process_chat_format_vllm(prompt, completion, state, tokenizer, True)
    assert ids[:2] == [101, 102] and ids[-1] == 103
    assert logprobs[:2] == [-0.1, -0.2] and logprobs[-1] == -0.3
    env_part = ids[2:-1]
    assert env_part and mask[2:-1] == [0] * len(env_part) and mask[:2] == [1, 1] and mask[-1] == 1
    assert set(logprobs[2:-1]) == {0.0}


def test_process_env_results_without_token_ids_re_tokenises_and_truncates(tokenizer: Any) -> None:
    prompts = [[{"role": "user", "content": "hi"}]] * 2
    completions = [[{"role": "assistant", "content": "short"}], [{"role": "assistant", "content": "a much longer reply"}]]
    states = [{"responses": []}, {"responses": []}]
    env = single()
    full = env.process_env_results(prompts, completions, states, [1.0, 1.0], tokenizer)
    limit = len(full.prompt_ids[0]) + len(full.completion_ids[0])
    cut = env.process_env_results(prompts, completions, states, [1.0, 1.0], tokenizer, max_seq_len=limit,
                                  mask_truncated_completions=True, zero_truncated_completions=True)
    assert cut.completion_ids[0] == full.completion_ids[0] and cut.rewards == [1.0, 0.0]
    assert len(cut.prompt_ids[1]) + len(cut.completion_ids[1]) == limit
    assert cut.completion_mask[1] == [0] * len(cut.completion_ids[1]) and cut.completion_mask[0].count(0) == 0
    assert cut.completion_logprobs[0] == [0.0] * len(cut.completion_ids[0])
    with pytest.raises(vf.EnvError, match="processing_class"):
        env.process_env_results_vllm(prompts, completions, states, [1.0, 1.0])


def test_process_completion_format(tokenizer: Any) -> None:
    prompt_ids, prompt_mask, ids, mask = single().process_completion_format("2+2 =", " 4", tokenizer)
    assert tokenizer.decode(prompt_ids) == "2+2 =" and tokenizer.decode(ids) == " 4"
    assert prompt_mask == [0] * len(prompt_ids) and mask == [1] * len(ids)


def test_tool_call_arguments_are_decoded_before_templating(tokenizer: Any) -> None:
    """0.1.5 turned each tool call's JSON ``arguments`` into an object before applying the template."""
    prompt = [{"role": "user", "content": "add"}]
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": 1})}}
    completion = [{"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "content": "1", "tool_call_id": "c1"}, {"role": "assistant", "content": "1"}]
    state = {"responses": [vllm_chat("", [7], [-0.1]), vllm_chat("1", [8], [-0.2])]}
    _, _, ids, mask, _ = single().process_chat_format_vllm(prompt, completion, state, tokenizer)
    assert ids[0] == 7 and ids[-1] == 8 and len(ids) > 2 and mask == [1] * len(ids)


def test_mock_response_objects_in_state_parse_like_sdk_ones() -> None:
    """A 0.1.x test builds ``state["responses"]`` from mocks; parsing reads their attributes."""
    token = MagicMock()
    token.token, token.logprob = "token_id:9", -0.7
    response = MagicMock()
    response.choices = [MagicMock()]
    response.choices[0].logprobs.content = [token]
    response.tokens = None  # not one of ours
    assert single().parse_chat_completion_tokens(response) == [9]
    assert single().parse_chat_completion_logprobs(response) == [-0.7]
