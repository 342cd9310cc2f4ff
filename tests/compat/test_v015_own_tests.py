"""The 0.1.x behaviours that environment authors' own test suites rely on (issue 41, item 4).

Each expectation is read from verifiers 0.1.5's source (file and function cited) and set up the
way 0.1.5's own tests set things up (``tests/conftest.py``, ``tests/test_*.py`` of its sdist):
``unittest.mock`` clients and tokenizers, hand-built states. 0.1.5's whole suite also runs against
this package, fetched from the package index and unchanged (``test_upstream_v015_suite.py``); where we differ on
purpose, the test here checks what we do instead, and docs/compat.md says why.
"""

from __future__ import annotations

import copy
import logging
from typing import Any
from unittest.mock import AsyncMock, MagicMock, Mock, call, patch

import httpx2 as httpx  # the HTTP library of the openai SDK (openai>=3)
import openai
import pytest

import verifiers as vf
from verifiers.envs.env_group import EnvGroupRubric
from verifiers.parsers.xml_parser import XMLParser
from verifiers.types import RolloutScores

ROWS = [{"question": "2+2", "answer": "4"}]


def f1(completion: Any, **kwargs: Any) -> float:
    return 1.0


def f2(completion: Any, **kwargs: Any) -> float:
    return 0.5


def f3(completion: Any, **kwargs: Any) -> float:
    return 0.25


class Plain(vf.Environment):
    """0.1.5's tests' ``SimpleEnvironment``: a rollout of its own that returns a state of its own."""

    async def rollout(self, client, model, prompt, answer="", task="default", info=None, sampling_args=None, **kw):
        response = await self.get_model_response(client=client, model=model, prompt=prompt, sampling_args=sampling_args)
        return [{"role": "assistant", "content": response.choices[0].message.content}], {"responses": [response]}


def mock_chat(content: str) -> MagicMock:
    response = MagicMock()
    response.choices = [MagicMock()]
    response.choices[0].message.content = content
    response.choices[0].message.tool_calls = None
    response.choices[0].finish_reason = "stop"
    return response


# -- EnvGroupRubric, RubricGroup (0.1.5: envs/env_group.py EnvGroupRubric.__init__,
#    rubrics/rubric_group.py, rubrics/rubric.py score_rollouts) -----------------------------------------
def test_env_group_rubric_all_reward_names_sorted_and_live() -> None:
    env1 = vf.SingleTurnEnv(eval_dataset=ROWS, rubric=vf.Rubric(funcs=[f2, f1]))
    env2 = vf.SingleTurnEnv(eval_dataset=ROWS, rubric=vf.Rubric(funcs=[f2, f3]))
    rubric = EnvGroupRubric({"task1": env1, "task2": env2})
    assert rubric.all_reward_names == ["f1", "f2", "f3"]  # 0.1.5: sorted(set(...))
    env2.rubric.reward_funcs.append(boom)  # our rubric lists are live (docs/compat.md): so is this
    assert rubric.all_reward_names == ["boom", "f1", "f2", "f3"]
    assert vf.EnvGroup(envs=[env1, env2]).rubric.all_reward_names == ["boom", "f1", "f2", "f3"]


def boom(completion: Any) -> float:
    raise RuntimeError("boom")


def test_rubric_group_is_a_rubric_with_0_1_5s_attributes() -> None:
    group = vf.RubricGroup(rubrics=[vf.Rubric()])
    assert isinstance(group, vf.Rubric)
    assert isinstance(group.logger, logging.Logger) and group.logger.name == "verifiers.rubrics.RubricGroup"
    assert isinstance(group.parser, vf.Parser)


def test_adding_to_an_empty_rubric_group_is_0_1_5s_assertion() -> None:
    """0.1.5 ``RubricGroup.add_reward_func``: ``assert len(self.rubrics) > 0, "RubricGroup must ..."``
    (reachable only by bypassing __init__, as 0.1.5's test does); here: an IndexError."""
    group = vf.RubricGroup.__new__(vf.RubricGroup)
    group.rubrics = []
    with pytest.raises(AssertionError, match="RubricGroup must have at least one rubric"):
        group.add_reward_func(f1)
    with pytest.raises(ValueError, match="RubricGroup must have at least one rubric"):  # and a ConfigError
        group.add_reward_func(f1)


async def test_scoring_an_empty_batch_gives_empty_columns() -> None:
    """0.1.5 ``Rubric.score_rollouts``: no rollouts, ``metrics={name: [] ...}``; 0.1.5's test passes one
    state with no prompts (zip truncated it). Here a strict zip raised."""
    group = vf.RubricGroup(rubrics=[vf.Rubric(funcs=[f1]), vf.Rubric(funcs=[f2])])
    state = {"timing": {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0}}
    scores = await group.score_rollouts(prompts=[], completions=[], answers=[], states=[state], tasks=[], infos=[])
    assert scores.reward == [] and scores.metrics == {"f1": [], "f2": []}
    scores = await vf.Rubric(funcs=[f1]).score_rollouts([], [], [], [], [], [])
    assert scores.reward == [] and scores.metrics == {"f1": []}


async def test_columns_of_different_lengths_are_refused() -> None:
    """Deliberate: 0.1.5 zipped them, silently scoring the shortest prefix."""
    with pytest.raises(ValueError, match=r"one entry per rollout.*'prompts': 2.*'answers': 1"):
        await vf.Rubric(funcs=[f1]).score_rollouts(["a", "b"], ["x", "y"], ["a"], [{}, {}], ["t", "t"], [{}, {}])


# -- error messages (0.1.5: envs/env_group.py EnvGroup.__init__, rubrics/rubric_group.py,
#    envs/environment.py Environment.__init__); 0.1.x tests use pytest.raises(..., match=...) -----------
def test_error_messages_start_with_0_1_5s_words() -> None:
    env = vf.SingleTurnEnv(eval_dataset=ROWS)
    cases = [
        (lambda: vf.EnvGroup(envs=[]), "EnvGroup requires at least one environment"),
        (lambda: vf.EnvGroup(envs=[env], env_names=["math", "code"]), "Number of env_names must match number of envs"),
        (lambda: vf.RubricGroup(rubrics=[]), "RubricGroup must have at least one rubric"),
        (lambda: Plain(client=MagicMock(), model="m"), "Either dataset or eval_dataset must be provided"),
    ]
    for build, words in cases:
        with pytest.raises(ValueError, match=f"^{words}") as exc:
            build()
        assert isinstance(exc.value, vf.ConfigError)
        assert len(str(exc.value)) > len(words) + 10  # and then says what to do


# -- the parser warning (0.1.5: envs/environment.py Environment.__init__) -----------------------------------
WARNING = "The parser and rubric parser are different. This may cause unexpected behavior."


def test_different_parsers_warn_through_the_environments_logger() -> None:
    """Set up as 0.1.5's test: ``logging.getLogger`` patched while the environment is built."""
    rubric = vf.Rubric()
    with patch("logging.getLogger") as get_logger:
        get_logger.return_value = Mock()
        Plain(dataset=ROWS, parser=vf.ThinkParser(), rubric=rubric)
    get_logger.return_value.warning.assert_called_once_with(WARNING)
    assert call("verifiers.envs.Plain") in get_logger.call_args_list


@pytest.mark.parametrize(
    "parser, rubric, warns",
    [(vf.ThinkParser(), vf.Rubric(), True), (vf.XMLParser(["answer"]), vf.Rubric(parser=vf.XMLParser(["a"])), False),
     (vf.ThinkParser(), None, False)],  # without a rubric, ours gets the environment's parser (0.1.5: Parser())
)  # fmt: skip
def test_the_warning_compares_parser_classes(caplog: pytest.LogCaptureFixture, parser, rubric, warns: bool) -> None:
    with caplog.at_level(logging.WARNING):
        env = vf.SingleTurnEnv(dataset=ROWS, parser=parser, rubric=rubric)
    assert (WARNING in caplog.messages) is warns
    assert env.logger.name == "verifiers.envs.SingleTurnEnv"


def test_parsers_and_environments_have_0_1_5s_loggers() -> None:
    assert vf.XMLParser(["answer"]).logger.name == "verifiers.parsers.XMLParser"
    assert vf.Parser().logger.name == "verifiers.parsers.Parser"
    assert vf.Rubric().logger.name == "verifiers.rubrics.Rubric"


# -- Rubric.call_reward_func (0.1.5: rubrics/rubric.py) ----------------------------------------------------
async def test_call_reward_func_passes_exactly_0_1_5s_arguments() -> None:
    seen: dict[str, Any] = {}

    def kwargs_func(completion: Any, **kwargs: Any) -> float:
        seen.update(kwargs)
        return len(kwargs)

    rubric = vf.Rubric(funcs=[], weights=[])
    got = await rubric.call_reward_func(
        func=kwargs_func, parser=vf.Parser(), prompt="p", completion="c", answer="a", state={}, task="t", info={}
    )
    assert got == 6 and set(seen) == {"parser", "prompt", "answer", "state", "task", "info"}  # 0.1.5's test
    # the rubric's objects, then the call's keywords over everything (0.1.5: {**common, **class_objects, **kwargs})
    judge = vf.Rubric(funcs=[], judge="J")
    seen.clear()
    await judge.call_reward_func(kwargs_func, "p", "c", "a", {}, extra=1)
    assert seen["judge"] == "J" and seen["extra"] == 1 and "example_id" not in seen and seen["info"] == {}


# -- tokenizer helpers with a Mock processing class (0.1.5: envs/environment.py process_*_vllm,
#    parse_*; 0.1.2: process_chat_format, process_completion_format, process_env_results) ---------------
def token_entries(ids: list[int]) -> list[Mock]:
    return [Mock(logprob=-0.1 * (k + 1), token=f"token_id:{i}") for k, i in enumerate(ids)]


def vllm_mock(ids: list[int]) -> Mock:
    """A response as 0.1.5's tests build one: plain ``Mock`` objects, ``tokens`` never set."""
    choice = Mock()
    choice.logprobs = Mock()
    choice.logprobs.content = token_entries(ids)
    response = Mock()
    response.choices = [choice]
    return response


def test_process_chat_format_vllm_calls_the_tokenizer_as_0_1_5() -> None:
    calls: list[Any] = []

    def apply_template(conversation, tokenize=False, add_generation_prompt=True):  # 0.1.5's tests' signature
        calls.append(call(conversation=copy.deepcopy(conversation), add_generation_prompt=add_generation_prompt))
        return list(range(len(conversation) * 5 + (1 if add_generation_prompt else 0)))

    tok = Mock()
    tok.apply_chat_template = Mock(side_effect=apply_template)
    prompt = [{"role": "user", "content": "hi"}]
    completion = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "more"},
                  {"role": "assistant", "content": "b"}]  # fmt: skip
    state = {"responses": [vllm_mock([101, 102]), vllm_mock([103])]}
    env = vf.SingleTurnEnv(dataset=ROWS)
    prompt_ids, prompt_mask, ids, mask, logprobs = env.process_chat_format_vllm(prompt, completion, state, tok)
    consumed = [prompt[0], {**completion[0], "tool_calls": []}]
    # 0.1.5: conversation= by keyword; add_generation_prompt given only for the prompt, so the
    # environment's turns get the stand-in's own default (here True; transformers' is False)
    assert [c.kwargs.keys() for c in tok.apply_chat_template.call_args_list] == [
        {"conversation", "add_generation_prompt"}, {"conversation"}, {"conversation"}
    ]
    assert calls == [
        call(conversation=prompt, add_generation_prompt=True),
        call(conversation=consumed, add_generation_prompt=True),
        call(conversation=[*consumed, {**completion[1], "tool_calls": []}], add_generation_prompt=True),
    ]
    assert prompt_ids == list(range(6)) and prompt_mask == [0] * 6
    # the user turn adds ids 10..14 to the 10 of the two messages consumed (side effect default: +1)
    assert ids == [101, 102, 11, 12, 13, 14, 15, 103] and mask == [1] * 8
    assert logprobs == pytest.approx([-0.1, -0.2, 0, 0, 0, 0, 0, -0.1])
    tok.encode.assert_not_called()


def test_process_completion_format_vllm_and_process_env_results_vllm_with_mocks() -> None:
    tok = Mock()
    tok.encode = Mock(side_effect=lambda text: list(range(len(text))))
    choice = Mock()
    choice.text = "4!"
    choice.logprobs = Mock()
    choice.logprobs.tokens = ["token_id:7", "token_id:8"]
    choice.logprobs.token_logprobs = [-0.5, -0.25]
    response = Mock()
    response.choices = [choice]
    state = {"responses": [response], "responses_start_idx": [0]}
    env = vf.SingleTurnEnv(dataset=[{"prompt": "2+2=", "answer": "4"}], message_type="completion")
    row = env.process_completion_format_vllm("2+2=", "4!", state, tok)
    assert row == ([0, 1, 2, 3], [0, 0, 0, 0], [7, 8], [1, 1], [-0.5, -0.25])
    assert tok.encode.call_args_list == [call("2+2=")]  # 0.1.5: encode(prompt), positional
    out = env.process_env_results_vllm(["2+2="], ["4!"], [state], [1.0], tok, max_seq_len=5,
                                       mask_truncated_completions=True, zero_truncated_completions=True)  # fmt: skip
    assert out.completion_ids == [[7]] and out.completion_mask == [[0]] and out.rewards == [0.0]


def test_0_1_2_process_chat_format_and_env_results_with_a_mock_tokenizer() -> None:
    """0.1.2's test: ``apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`` returns
    text, ``encode(text)`` positional ids."""
    tok = Mock()
    tok.apply_chat_template = Mock(side_effect=lambda messages, tokenize=False, add_generation_prompt=True: (
        "User: What is 2+2?Assistant:" if add_generation_prompt else "User: What is 2+2?Assistant: 4"
    ))  # fmt: skip
    tok.encode = Mock(side_effect=lambda text: list(range(len(text.split()))))
    prompt = [{"role": "user", "content": "What is 2+2?"}]
    completion = [{"role": "assistant", "content": "4"}]
    env = vf.SingleTurnEnv(dataset=ROWS)
    assert env.process_chat_format(prompt, completion, tok) == ([0, 1, 2, 3], [0] * 4, [4], [1])
    assert tok.apply_chat_template.call_args_list == [
        call(prompt, tokenize=False, add_generation_prompt=True),
        call(prompt + completion, tokenize=False, add_generation_prompt=False),
    ]
    out = env.process_env_results([prompt], [completion], [{}], [1.0], tok)  # no token ids: 0.1.2's path
    assert out.prompt_ids == [[0, 1, 2, 3]] and out.completion_ids == [[4]] and out.completion_logprobs == [[0.0]]
    assert env.process_completion_format("a b", "c", tok) == ([0, 1], [0, 0], [0], [1])


def test_parse_methods_read_a_plain_mock() -> None:
    """0.1.5's tests never set ``response.tokens``: a Mock answers it with another Mock (no longer read)."""
    response = vllm_mock([1234, 5678])
    env = vf.SingleTurnEnv(dataset=ROWS)
    assert env.parse_chat_completion_tokens(response) == [1234, 5678]
    assert env.parse_chat_completion_logprobs(response) == pytest.approx([-0.1, -0.2])


# -- get_model_response (0.1.5: envs/environment.py) -----------------------------------------------------
AUDIO = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "ZHVtbXk=", "format": "wav"}},
                                      {"type": "text", "text": "Describe this audio"}]}]  # fmt: skip


class DummyClient:
    """0.1.5's audio test's stand-in client: an async ``create`` that records its keywords."""

    def __init__(self, returns: Any = None) -> None:
        self.kwargs: dict[str, Any] | None = None
        self.returns = {"ok": True} if returns is None else returns
        self.chat = self
        self.completions = self

    async def create(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        return self.returns


async def test_get_model_response_hands_back_what_create_returned() -> None:
    client = DummyClient()
    fake_self = type("S", (), {"message_type": "chat", "logger": logging.getLogger("test")})()
    got = await vf.Environment.get_model_response(fake_self, client=client, model="gpt-4o-audio-preview",
                                                  prompt=AUDIO, oai_tools=None, sampling_args=None, message_type=None)  # fmt: skip
    assert got is client.returns  # unread, unvalidated
    assert client.kwargs == {"model": "gpt-4o-audio-preview", "messages": AUDIO, "modalities": ["text"]}
    await vf.Environment.get_model_response(fake_self, client, "m", AUDIO, sampling_args={"modalities": ["text", "audio"]})
    assert client.kwargs["modalities"] == ["text", "audio"]
    await vf.Environment.get_model_response(fake_self, client, "m", [{"role": "user", "content": "hello"}])
    assert "modalities" not in client.kwargs
    # completion mode and tools, as 0.1.5 sent them
    env = vf.SingleTurnEnv(dataset=ROWS)
    tools = [{"type": "function", "function": {"name": "echo", "parameters": {}}}]
    assert await env.get_model_response(client, "m", [{"role": "user", "content": "x"}], oai_tools=tools) is client.returns
    assert client.kwargs["tools"] == tools
    sync = MagicMock()
    sync.completions.create.return_value = sentinel = object()
    assert await env.get_model_response(sync, "m", "2+2=", sampling_args={"max_tokens": 3}, message_type="completion") is sentinel
    assert sync.completions.create.call_args.kwargs == {"model": "m", "prompt": "2+2=", "max_tokens": 3}


async def test_get_model_response_reraises_create_errors_but_maps_the_overlong_prompt() -> None:
    env = vf.SingleTurnEnv(dataset=ROWS)
    client = AsyncMock()
    client.chat.completions.create.side_effect = RuntimeError("API Error")
    with pytest.raises(RuntimeError, match="API Error"):  # 0.1.5 re-raised it as it was
        await env.get_model_response(client, "m", [{"role": "user", "content": "x"}])
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    body = '{"error":{"message":"This model\'s maximum context length is 8 tokens. However, you requested 99 tokens."}}'
    response = httpx.Response(400, request=request, text=body)
    client.chat.completions.create.side_effect = openai.BadRequestError(body, response=response, body=None)
    placeholder = await env.get_model_response(client, "m", [{"role": "user", "content": "x"}])
    assert placeholder.id == "overlong-prompt" and placeholder.choices[0].finish_reason == "length"


async def test_a_0_1_5_rollout_gets_the_mock_response_and_its_completion_is_kept() -> None:
    """0.1.5's ``SimpleEnvironment.rollout`` asserts ``isinstance(response, ChatCompletion)`` on the
    ``MagicMock(spec=ChatCompletion)`` its client returns, and returns a state of its own."""
    from openai.types.chat import ChatCompletion

    response = MagicMock(spec=ChatCompletion)
    response.choices = [MagicMock()]
    response.choices[0].message.content = "4"
    client = AsyncMock()
    client.chat.completions.create.return_value = response
    env = Plain(dataset=ROWS, rubric=vf.Rubric(funcs=[lambda completion, answer: float(completion[-1]["content"] == answer)]))
    out = await env.a_generate({"prompt": [[{"role": "user", "content": "2+2"}]], "answer": ["4"]}, client, "m")
    assert out.state[0]["responses"][0] is response
    assert out.completion == [[{"role": "assistant", "content": "4"}]]  # what rollout returned (was: [])
    assert out.reward == [1.0]


# -- is_completed, state, completion (0.1.5: envs/singleturn_env.py, envs/multiturn_env.py) --------------
class Echo(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": f"turn {state['turn']}"}], state


async def test_is_completed_on_states_without_turn() -> None:
    single = vf.SingleTurnEnv(dataset=ROWS)
    assert not await single.is_completed([{"role": "user", "content": "Hello"}], {"responses": []})  # was KeyError
    assert await single.is_completed([], {"responses": [MagicMock()]})
    assert await single.is_completed([], {"responses": [MagicMock(), MagicMock()]})
    # without a turn limit the default never reads `turn` (0.1.5 read it first and raised KeyError)
    assert not await Echo(dataset=ROWS).is_completed([], {"responses": []})
    limited = Echo(dataset=ROWS, max_turns=2)
    assert await limited.max_turns_reached({"turn": 2}) and not await limited.max_turns_reached({"turn": 1})


async def test_a_finished_rollout_has_0_1_5s_completion_and_state() -> None:
    client = AsyncMock()
    client.chat.completions.create.side_effect = [mock_chat("one"), mock_chat("two")]
    env = Echo(dataset=ROWS, max_turns=2)
    prompt = [{"role": "user", "content": "start"}]
    completion, state = await env.rollout(client, "m", prompt, answer="a", task="t", info={"k": 1})
    assert completion == [{"role": "assistant", "content": "one"}, {"role": "user", "content": "turn 1"},
                          {"role": "assistant", "content": "two"}]  # fmt: skip
    for key, value in {"prompt": prompt, "answer": "a", "task": "t", "info": {"k": 1}, "turn": 2}.items():
        assert state[key] == value, key
    assert state["id"] == 0 and len(state["responses"]) == 2 and "responses_start_idx" not in state
    assert set(state["timing"]) == {"generation_ms", "scoring_ms", "total_ms"}
    assert prompt == [{"role": "user", "content": "start"}]  # the caller's prompt is left alone
    # deliberate: 0.1.5 left state["completion"] == []; 0.1.6 and later (and we) keep the completion there
    assert state["completion"] == completion
    # completion mode: a string, and 0.1.5's responses_start_idx
    text_client = MagicMock()
    text_client.completions.create.return_value = {"choices": [{"index": 0, "text": " 4", "finish_reason": "stop"}]}
    text_env = vf.SingleTurnEnv(dataset=[{"prompt": "2+2 =", "answer": "4"}], message_type="completion")
    completion, state = await text_env.rollout(text_client, "m", "2+2 =")
    assert completion == " 4" and state["responses_start_idx"] == [0] and state["turn"] == 1


# -- a_generate without interleaved scoring (0.1.5: envs/environment.py a_generate) -----------------------
async def test_not_interleaved_scores_the_batch_with_the_rubrics_score_rollouts() -> None:
    """0.1.5's tests mock ``env.rubric.score_rollouts`` and pass ``interleave_scoring=False``."""
    client = AsyncMock()
    client.chat.completions.create.return_value = mock_chat("4")
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[f1]))
    env.rubric.score_rollouts = AsyncMock(return_value=RolloutScores(reward=[0.25, 0.75], metrics={"x": [1.0, 2.0]}))
    inputs = {"prompt": [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]], "answer": ["4", "6"]}
    out = await env.a_generate(inputs, client=client, model="m", interleave_scoring=False)
    assert out.reward == [0.25, 0.75] and out.metrics == {"x": [1.0, 2.0]}
    kwargs = env.rubric.score_rollouts.await_args.kwargs
    assert kwargs["answers"] == ["4", "6"] and kwargs["apply_weights"] is True and len(kwargs["states"]) == 2
    assert [r.reward for r in out.results] == [0.25, 0.75]
    out = await env.a_generate(inputs, client=client, model="m")  # interleaved: per rollout, as 0.1.5
    assert out.reward == [1.0, 1.0] and env.rubric.score_rollouts.await_count == 1


# -- XMLParser (0.1.5: parsers/xml_parser.py XMLParser.__init__, get_format_reward_func) ------------------
def test_xml_parser_field_spec_errors_and_format_reward_values() -> None:
    with pytest.raises(TypeError):
        XMLParser(["valid", 123])  # type: ignore[list-item]
    with pytest.raises(ValueError):  # deliberate: 0.1.5 built a parser without fields
        XMLParser([])
    reward = XMLParser(fields=["reasoning", "answer"]).get_format_reward_func()
    good = reward([{"role": "assistant", "content": "<reasoning>Good reasoning</reasoning><answer>42</answer>"}])
    assert good == 1.0  # 0.1.5: 1.0
    # deliberate (docs/compat.md, "Format reward is strict"): 0.1.5 gave plain text 0.2
    assert reward([{"role": "assistant", "content": "Just plain text without XML"}]) == 0.0


async def test_an_overridden_run_rollouts_gets_the_dataset_repeated() -> None:
    """0.1.5 ``evaluate``: ``inputs.repeat(rollouts_per_example)`` (a,b,a,b), then ``run_rollouts``;
    the override path dropped the repeats before."""
    seen: list[list[str]] = []

    class Logged(vf.SingleTurnEnv):
        async def run_rollouts(self, client, model, prompts, *args, **kwargs):
            seen.append([p[-1]["content"] for p in prompts])
            return await super().run_rollouts(client, model, prompts, *args, **kwargs)

    client = AsyncMock()
    client.chat.completions.create.return_value = mock_chat("4")
    env = Logged(dataset=[{"question": "a"}, {"question": "b"}], rubric=vf.Rubric(funcs=[f1]))
    out = await env.a_evaluate(client, "m", rollouts_per_example=2, interleave_scoring=False)
    assert seen == [["a", "b", "a", "b"]] and out.reward == [1.0] * 4
