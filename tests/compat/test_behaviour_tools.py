"""0.1.x tool environments: SDK-like tool calls, the last turn, tool errors and results.

`load_tool_test` reproduces upstream's ``environments/tool_test`` (v0.1.5): ToolEnv with
``max_turns=1``, a reward that reads ``call.function.name`` from the last assistant
message. On 0.1.5 it scores 1 when the model calls exactly the requested tools.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from datasets import Dataset
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def tool_A(x: int) -> int:
    """
    Tool for adding 1 to an integer.

    Args:
        x: The integer to add 1 to.

    Returns:
        The integer plus 1.
    """
    return x + 1


def tool_B(x: str) -> str:
    """
    Tool for concatenating a string with "2".

    Args:
        x: The string to concatenate with "2".
    """
    return x + "2"


def tool_C(x: float) -> dict:
    """
    Tool returning a dict, to see how results are stringified.

    Args:
        x: A number.
    """
    return {"x": x, "ok": True}


tool_list = [tool_A, tool_B, tool_C]


def tool_call_reward_func(completion, info):
    tool_calls = completion[-1].get("tool_calls", [])
    called_tool_names = sorted([call.function.name for call in tool_calls])
    expected_tool_names = sorted(info["tool_names"])
    return 1.0 if called_tool_names == expected_tool_names else 0.0


def load_tool_test(tool_names: list[list[str]]) -> vf.ToolEnv:
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Call the following tools with arguments of your choice: {names}"}],
            "info": {"tool_names": names},
        }
        for names in tool_names
    ]
    rubric = vf.ToolRubric(tools=tool_list)
    rubric.add_reward_func(tool_call_reward_func)
    return vf.ToolEnv(
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows),
        parser=vf.Parser(),
        rubric=rubric,
        tools=tool_list,
        max_turns=1,
    )


@pytest.fixture
def tool_server() -> Iterator[ScriptedServer]:
    # Asked for tool_A and tool_B: calls both, with no text (content null on the wire).
    script = ServerScript(
        replies=[
            ScriptedReply(
                match=r"tool_A', 'tool_B'",
                tool_calls=[
                    ScriptedToolCall(name="tool_A", arguments='{"x": 1}'),
                    ScriptedToolCall(name="tool_B", arguments='{"x": "a"}'),
                ],
            ),
            ScriptedReply(tool_calls=[ScriptedToolCall(name="tool_A", arguments='{"x": 5}')]),
        ]
    )
    with ScriptedServer(script) as srv:
        yield srv


def test_tool_test_scores_as_on_0_1_5(tool_server: ScriptedServer) -> None:
    env = load_tool_test([["tool_A", "tool_B"], ["tool_A"], ["tool_B"]])
    out = env.evaluate(AsyncOpenAI(base_url=tool_server.base_url, api_key="k"), "m")
    assert out.reward == [1.0, 1.0, 0.0]
    for r in out.results:
        # max_turns=1 ends the episode on the model's turn: no tool runs after it.
        assert [m["role"] for m in r.completion] == ["assistant"]
        assert r.stop_reason == "max_turns"
        assert tool_server.n_requests == 3
    last = out.completion[0][-1]
    assert last["content"] == ""  # tool calls only: "" as in 0.1.x, not None
    call = last["tool_calls"][0]
    assert (call.function.name, call.function.arguments, call.id) == ("tool_A", '{"x": 1}', call["id"])
    assert call["function"]["name"] == "tool_A" and call.type == "function"
    assert out.metrics["total_tool_calls"] == [2.0, 1.0, 1.0]
    # Still plain JSON: results.jsonl rows and pydantic dumps.
    row = json.loads(out.results[0].model_dump_json())
    assert row["completion"][0]["tool_calls"][1] == {
        "id": call_id(row, 1),
        "type": "function",
        "function": {"name": "tool_B", "arguments": '{"x": "a"}'},
    }
    json.dumps(out.completion)  # results.jsonl rows are model_dump_json() of each result

    ds = env.make_dataset(out)
    assert ds.column_names[:6] == ["prompt", "completion", "answer", "task", "reward", "average_reward"]
    assert json.loads(ds[0]["completion"][0]["tool_calls"][0])["function"]["name"] == "tool_A"


def call_id(row: dict, i: int) -> str:
    return row["completion"][0]["tool_calls"][i]["id"]


def test_tools_run_between_turns_and_results_are_str(tool_server: ScriptedServer) -> None:
    tool_server.set_script(
        ServerScript(
            replies=[
                ScriptedReply(
                    turn=0,
                    tool_calls=[
                        ScriptedToolCall(name="tool_C", arguments='{"x": 2.5}'),
                        ScriptedToolCall(name="tool_A", arguments='{"y": 1}'),  # wrong argument name
                        ScriptedToolCall(name="tool_A", arguments="{not json"),
                    ],
                ),
                ScriptedReply(content="done"),
            ]
        )
    )
    env = vf.ToolEnv(dataset=[{"question": "go"}], tools=tool_list, max_turns=3)
    out = env.evaluate(AsyncOpenAI(base_url=tool_server.base_url, api_key="k"), "m")
    r = out.results[0]
    assert r.error is None and r.stop_reason == "completed"
    roles = [m["role"] for m in r.completion]
    assert roles == ["assistant", "tool", "tool", "tool", "assistant"]
    ok, bad_args, bad_json = r.completion[1:4]
    assert ok["content"] == str({"x": 2.5, "ok": True})  # str(result), as in 0.1.x
    assert ok["tool_call_id"] == r.completion[0]["tool_calls"][0].id
    assert "y" in bad_args["content"] and "x" in bad_args["content"]  # told what is wrong
    assert "not valid JSON" in bad_json["content"]
    assert [e.type for e in r.state["tool_errors"]] == ["ToolArgumentsError", "ToolArgumentsError"]


async def test_call_tool_returns_errors_to_the_model() -> None:
    env = vf.ToolEnv(dataset=[{"question": "q"}], tools=tool_list, error_formatter=lambda e: f"E:{type(e).__name__}")
    good = await env.call_tool("tool_A", {"x": 41}, "c1")
    assert good == {"role": "tool", "content": "42", "tool_call_id": "c1"}
    wrong = await env.call_tool("tool_A", {"z": 1}, "c2")  # never raises
    assert wrong == {"role": "tool", "content": "E:ToolArgumentsError", "tool_call_id": "c2"}
    unknown = await env.call_tool("nope", {}, "c3")
    assert unknown["content"] == "E:ToolNotFoundError"
    crash = await env.call_tool("tool_B", {"x": 3}, "c4")  # int + str inside the tool
    assert crash["content"] == "E:TypeError"  # the tool's own exception, as in 0.1.x


def test_responses_in_state_read_like_sdk_objects(tool_server: ScriptedServer) -> None:
    env = load_tool_test([["tool_A"]])
    out = env.evaluate(AsyncOpenAI(base_url=tool_server.base_url, api_key="k"), "m")
    (response,) = out.state[0]["responses"]
    msg = response.choices[0].message
    assert msg.tool_calls[0].function.name == "tool_A"
    assert response.choices[0].finish_reason == "tool_calls"
