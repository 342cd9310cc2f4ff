"""Every public name and module path of verifiers v0.1.5 that published environments import.

The lists are written out from upstream's v0.1.5 tree (``verifiers/__init__.py``'s
``__all__`` minus the training names, ``verifiers/types.py``, ``verifiers/utils/*``,
``verifiers/envs|rubrics|parsers|scripts/*``), so a rename here breaks this test.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import verifiers as vf

# v0.1.5 verifiers/__init__.py __all__, without the training names (GRPOTrainer, GRPOConfig,
# grpo_defaults, lora_defaults, get_model, get_tokenizer, get_model_and_tokenizer).
TOP_LEVEL = [
    "Parser", "ThinkParser", "XMLParser", "Rubric", "JudgeRubric", "RubricGroup", "ToolRubric",
    "MathRubric", "TextArenaEnv", "Environment", "MultiTurnEnv", "SingleTurnEnv", "PythonEnv",
    "SandboxEnv", "StatefulToolEnv", "ToolEnv", "EnvGroup", "extract_boxed_answer",
    "extract_hash_answer", "load_example_dataset", "setup_logging", "load_environment",
    "print_prompt_completions_sample",
]  # fmt: skip

# v0.1.5 verifiers/types.py (``from .types import *`` put them all on ``vf`` too).
TYPES = [
    "ChatCompletion", "ChatCompletionMessageParam", "ChatCompletionMessageToolCall",
    "ChatCompletionRole", "ChatCompletionToolParam", "Completion", "FunctionDefinition",
    "FunctionParameters", "ChatMessage", "MessageType", "ModelResponse", "Message", "Messages",
    "Info", "State", "SamplingArgs", "RewardFunc", "JsonPrimitive", "GenerateInputs",
    "GenerateOutputs", "RolloutScore", "RolloutScores", "ProcessedOutputs", "Endpoint", "Endpoints",
]  # fmt: skip

MODULE_NAMES: dict[str, list[str]] = {
    "verifiers.envs.environment": ["Environment"],
    "verifiers.envs.env_group": ["EnvGroup"],
    "verifiers.envs.multiturn_env": ["MultiTurnEnv"],
    "verifiers.envs.singleturn_env": ["SingleTurnEnv"],
    "verifiers.envs.tool_env": ["ToolEnv"],
    "verifiers.envs.stateful_tool_env": ["StatefulToolEnv"],
    "verifiers.envs.sandbox_env": ["SandboxEnv"],
    "verifiers.envs.python_env": ["PythonEnv"],
    "verifiers.envs.textarena_env": ["TextArenaEnv"],
    "verifiers.rubrics.rubric": ["Rubric"],
    "verifiers.rubrics.rubric_group": ["RubricGroup"],
    "verifiers.rubrics.judge_rubric": ["JudgeRubric"],
    "verifiers.rubrics.math_rubric": ["MathRubric"],
    "verifiers.rubrics.tool_rubric": ["ToolRubric"],
    "verifiers.parsers.parser": ["Parser"],
    "verifiers.parsers.xml_parser": ["XMLParser"],
    "verifiers.parsers.think_parser": ["ThinkParser"],
    "verifiers.scripts.eval": ["main"],
    "verifiers.scripts.init": ["main"],
    "verifiers.scripts.install": ["main"],
    "verifiers.scripts.tui": ["main"],
    "verifiers.utils.async_utils": ["maybe_await"],
    "verifiers.utils.client_utils": ["setup_client"],
    "verifiers.utils.data_utils": [
        "BOXED_SYSTEM_PROMPT", "THINK_BOXED_SYSTEM_PROMPT", "extract_boxed_answer", "extract_hash_answer",
        "get_preprocess_fn", "load_example_dataset", "strip_non_numeric",
    ],
    "verifiers.utils.env_utils": ["load_environment"],
    "verifiers.utils.logging_utils": ["setup_logging", "print_prompt_completions_sample"],
    "verifiers.utils.message_utils": [
        "cleanup_message", "cleanup_messages", "get_overlong_prompt_dummy_response",
        "message_to_printable", "messages_to_printable", "sanitize_tool_calls",
    ],
    "verifiers.utils.tool_utils": ["convert_func_to_oai_tool"],
    "verifiers.utils.tools": ["ask", "calculator", "python", "search", "search_ddg"],
    "verifiers.types": TYPES,
}  # fmt: skip


@pytest.mark.parametrize("name", TOP_LEVEL + TYPES)
def test_top_level_name(name: str) -> None:
    exec(f"from verifiers import {name}", {})  # the statement 0.1.x environments write
    assert getattr(vf, name) is not None
    if name != "ModelResponse":  # vf.ModelResponse is this library's response class (documented)
        types_value = getattr(importlib.import_module("verifiers.types"), name, None)
        if types_value is not None:
            assert getattr(vf, name) is types_value


@pytest.mark.parametrize("module", sorted(MODULE_NAMES))
def test_module_path(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in MODULE_NAMES[module] if not hasattr(mod, n)]
    assert missing == []


def test_aliases_are_the_core_classes() -> None:
    from verifiers.envs.stateful_tool_env import StatefulToolEnv
    from verifiers.rubrics.rubric_group import RubricGroup

    assert StatefulToolEnv is vf.StatefulToolEnv and RubricGroup is vf.RubricGroup
    assert issubclass(vf.PythonEnv, vf.SandboxEnv) and issubclass(vf.SandboxEnv, vf.StatefulToolEnv)
    assert issubclass(vf.TextArenaEnv, vf.MultiTurnEnv)


def test_types_match_upstream_shapes() -> None:
    from openai.types.chat import ChatCompletion
    from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall

    from verifiers import types

    assert types.ChatCompletion is ChatCompletion
    assert types.ChatCompletionMessageToolCall is ChatCompletionMessageToolCall
    scores = vf.RolloutScores(reward=[1.0, 0.5], metrics={"f": [1.0, 0.0]})
    assert scores.reward == [1.0, 0.5] and scores.metrics["f"] == [1.0, 0.0]
    assert vf.RolloutScore(reward=1.0).metrics == {}
    endpoint: vf.Endpoint = {"key": "K", "url": "http://x/v1", "model": "m"}
    assert vf.Endpoint.__annotations__.keys() == {"key", "url", "model"} and endpoint["model"] == "m"
    processed = vf.ProcessedOutputs(
        prompt_ids=[[1]], prompt_mask=[[1]], completion_ids=[[2]], completion_mask=[[1]],
        completion_logprobs=[[-0.1]], rewards=[1.0],
    )  # fmt: skip
    assert processed.rewards == [1.0]
    with pytest.raises(ValueError):
        vf.GenerateInputs(prompt=[[{"role": "user", "content": "q"}]], answer=["a", "b"]).to_list()


async def test_async_utils_maybe_await_calls_the_function() -> None:
    from verifiers.utils.async_utils import maybe_await

    async def add(a: int, b: int = 0) -> int:
        return a + b

    assert await maybe_await(add, 1, b=2) == 3
    assert await maybe_await(lambda x: x * 2, 4) == 8


def test_convert_func_to_oai_tool_uses_docstring_and_hints() -> None:
    from verifiers.utils.tool_utils import convert_func_to_oai_tool

    def lookup(city: str, limit: int = 3) -> str:
        """Find places.

        Args:
            city: Name of the city.
            limit: How many results.
        """
        return city

    tool = convert_func_to_oai_tool(lookup)
    fn = tool["function"]
    assert tool["type"] == "function" and fn["name"] == "lookup" and fn["description"] == "Find places."
    # 0.1.5's (openai-agents') strict schema: per-parameter titles, every parameter required
    assert fn["parameters"]["properties"]["city"] == {"description": "Name of the city.", "title": "City", "type": "string"}
    assert fn["parameters"]["required"] == ["city", "limit"] and tool["function"]["strict"] is True


def test_example_tools_python_and_calculator() -> None:
    from verifiers.utils.tools import calculator, python

    assert python("x = 5\ny = 10\nx + y") == "15"  # notebook-style trailing expression
    assert python("print('hi')") == "hi"
    assert "ZeroDivisionError" in python("1/0")
    assert python("import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)").startswith(
        "Traceback"
    )
    assert calculator("3 * (17 + 4)") == "63"
    assert calculator("__import__('os')").startswith("Error")
    assert "tool" not in inspect.signature(python).parameters


def test_message_utils() -> None:
    from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall, Function

    from verifiers.utils.message_utils import (
        cleanup_messages,
        get_overlong_prompt_dummy_response,
        messages_to_printable,
        sanitize_tool_calls,
    )

    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "look", "image_url": None},
                                     {"type": "image_url", "image_url": {"url": "u"}, "text": None}]},
        {"role": "assistant", "content": "ok", "extra": 1},
    ]  # fmt: skip
    assert messages_to_printable(msgs)[0]["content"] == "look\n\n[image]"
    clean = cleanup_messages(msgs)
    assert clean[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "u"}},
    ]
    assert clean[1] == {"role": "assistant", "content": "ok"}
    call = ChatCompletionMessageToolCall(
        id="c1", type="function", function=Function(name="f", arguments="{}")
    )
    dict_call = {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
    sanitized = sanitize_tool_calls([{"role": "assistant", "content": "", "tool_calls": [call, dict_call]}])
    assert [c for c in sanitized[0]["tool_calls"] if '"name": "f"' in c or '"name": "g"' in c] == sanitized[
        0
    ]["tool_calls"]
    assert get_overlong_prompt_dummy_response("chat").choices[0].finish_reason == "length"


def test_setup_logging_is_opt_in_and_idempotent() -> None:
    code = (
        "import logging, verifiers as vf\n"
        "lg = logging.getLogger('verifiers')\n"
        "before = len(lg.handlers)\n"
        "vf.setup_logging('DEBUG'); vf.setup_logging('WARNING')\n"
        "print(before, len(lg.handlers), lg.level, lg.propagate)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", str(30), "False"]


def test_print_prompt_completions_sample(capsys: pytest.CaptureFixture[str]) -> None:
    vf.print_prompt_completions_sample(
        prompts=[[{"role": "user", "content": "2+2?"}]],
        completions=[[{"role": "assistant", "content": "4", "tool_calls": [{"function": {"name": "calc", "arguments": {"x": 1}}}]}]],
        rewards=[1.0],
        step=7,
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "Step 7" in out and "2+2?" in out and "1.00" in out and '"name": "calc"' in out


def test_scripts_eval_runs_vf_eval(capsys: pytest.CaptureFixture[str]) -> None:
    from verifiers.scripts.eval import main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "--rollouts-per-example" in capsys.readouterr().out
