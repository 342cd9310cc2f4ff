"""python-math: problem generation, and rollouts whose tool calls really run in the sandbox."""

from __future__ import annotations

import inspect
import json
import math
import re

import pytest
import python_math
import sympy
from python_math import KINDS, solve

import verifiers as vf
import verifiers.testing
from verifiers.testing import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript


def small_env(**kwargs: object) -> vf.Environment:
    args: dict[str, object] = {"num_train_examples": 14, "num_eval_examples": 7, "seed": 5}
    args.update(kwargs)
    return python_math.load_environment(**args)


def reference(info: dict[str, int]) -> int:
    """Independent answers (sympy / brute force), to check the generator's own solvers."""
    kind, n = info["kind"], info["n"]
    if kind == "sum_primes":
        return sum(sympy.primerange(n))
    if kind == "count_primes":
        return int(sympy.primepi(n - 1))
    if kind == "factorial_digit_sum":
        return sum(int(c) for c in str(math.factorial(n)))
    if kind == "power_digit_sum":
        return sum(int(c) for c in str(2**n))
    if kind == "num_divisors":
        return int(sympy.divisor_count(n))
    if kind == "collatz_steps":
        steps = 0
        while n != 1:
            n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
        return steps
    if kind == "fibonacci_mod":
        return int(sympy.fibonacci(n)) % info["m"]
    raise AssertionError(kind)


# What a model would send to the tool, per kind: small programs that print the answer.
PROGRAMS = {
    "sum_primes": "n={n}\ns=[1]*n\ns[0]=s[1]=0\nfor i in range(2,int(n**.5)+1):\n    if s[i]: s[i*i::i]=[0]*len(s[i*i::i])\nprint(sum(i for i in range(n) if s[i]))",
    "count_primes": "n={n}\ns=[1]*n\ns[0]=s[1]=0\nfor i in range(2,int(n**.5)+1):\n    if s[i]: s[i*i::i]=[0]*len(s[i*i::i])\nprint(sum(s))",
    "factorial_digit_sum": "import math\nprint(sum(map(int, str(math.factorial({n})))))",
    "power_digit_sum": "print(sum(map(int, str(2**{n}))))",
    "num_divisors": "n={n}\nprint(sum(1 for d in range(1, int(n**.5)+1) if n % d == 0 for _ in {{d, n // d}}))",
    "collatz_steps": "n, k = {n}, 0\nwhile n != 1:\n    n, k = (n // 2 if n % 2 == 0 else 3 * n + 1), k + 1\nprint(k)",
    "fibonacci_mod": "a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a % {m})",
}


# -- data ----------------------------------------------------------------------------------


def test_data_is_seeded_sized_and_correct() -> None:
    a, b, c = small_env(), small_env(), small_env(seed=6)
    assert len(a.dataset) == 14 and len(a.eval_dataset) == 7
    assert a.dataset["info"] == b.dataset["info"] and a.eval_dataset["answer"] == b.eval_dataset["answer"]
    assert a.dataset["info"] != c.dataset["info"]
    assert not {r["prompt"][-1]["content"] for r in a.dataset} & {
        r["prompt"][-1]["content"] for r in a.eval_dataset
    }
    assert {r["info"]["kind"] for r in a.dataset} == set(KINDS)
    for row in [*a.dataset, *a.eval_dataset]:
        assert row["answer"] == str(reference(row["info"])), row
        assert str(row["info"]["n"]) in row["prompt"][-1]["content"]


def test_kinds_option_and_validation() -> None:
    env = small_env(kinds=["collatz_steps"])
    assert {r["info"]["kind"] for r in env.dataset} == {"collatz_steps"}
    with pytest.raises(ValueError, match="unknown problem kinds"):
        small_env(kinds=["nope"])
    assert solve("num_divisors", {"n": 360}) == 24


# -- rollouts over HTTP --------------------------------------------------------------------


async def test_code_runs_in_the_sandbox_and_the_answer_scores() -> None:
    env = small_env()
    rows = list(env.eval_dataset)
    replies = [
        ScriptedReply(
            turn=0,
            match=re.escape(r["prompt"][-1]["content"]),
            tool_calls=[
                ScriptedToolCall(
                    name="python",
                    arguments=json.dumps({"code": PROGRAMS[r["info"]["kind"]].format(**r["info"])}),
                )
            ],
        )
        for r in rows
    ]
    replies.append(ScriptedReply(turn=1, content="The program printed it: \\boxed{{last_message}}"))
    async with ScriptedServer(ServerScript(replies=replies)) as srv:
        out = await env.a_evaluate(
            vf.make_client(srv.base_url), "scripted", num_examples=len(rows), max_concurrent=2
        )
    assert out.error == [None] * len(rows)
    for completion, answer in zip(out.completion, out.answer, strict=True):
        assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
        assert completion[1]["content"] == answer  # printed by the child process
    assert out.reward == [1.0] * len(rows)
    assert out.metrics["python_calls"] == [1.0] * len(rows)
    (schema,) = srv.requests[0]["tools"]
    assert schema["function"]["name"] == "python"


async def test_malformed_and_failing_code_come_back_as_tool_messages() -> None:
    env = small_env()
    script = ServerScript(
        replies=[
            ScriptedReply(
                turn=0,
                tool_calls=[
                    ScriptedToolCall(name="python", arguments="{bad"),
                    ScriptedToolCall(name="python", arguments=json.dumps({"code": "print('before')\n1 / 0"})),
                ],
            ),
            ScriptedReply(turn=1, content="\\boxed{0}"),
        ]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=1)
    assert out.error == [None]
    assert out.stop_reason == ["completed"]
    completion = out.completion[0]
    assert [m["role"] for m in completion] == ["assistant", "tool", "tool", "assistant"]
    bad_json, crashed = completion[1]["content"], completion[2]["content"]
    assert bad_json.startswith("Error:") and "not valid JSON" in bad_json
    assert "before" in crashed and "ZeroDivisionError" in crashed and "[exit code 1]" in crashed
    assert len(out.state[0]["tool_errors"]) == 1  # a crashing program is output, not a tool error
    assert out.metrics["python_calls"] == [2.0]


async def test_sandbox_limits_come_from_load_environment() -> None:
    env = small_env(wall_time_s=1.0, memory_mb=256)
    script = ServerScript(
        replies=[
            ScriptedReply(
                turn=0,
                tool_calls=[
                    ScriptedToolCall(name="python", arguments=json.dumps({"code": "while True:\n    pass"})),
                    ScriptedToolCall(
                        name="python", arguments=json.dumps({"code": "x = bytearray(400 * 2**20)"})
                    ),
                ],
            ),
            ScriptedReply(turn=1, content="\\boxed{0}"),
        ]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=1)
    assert out.error == [None]
    looped, allocated = (m["content"] for m in out.completion[0][1:3])
    assert "timed out" in looped or "CPU time limit" in looped
    assert "MemoryError" in allocated


async def test_load_by_id() -> None:
    env = vf.load_environment("python-math", num_train_examples=3, num_eval_examples=2, max_turns=3)
    assert env.env_id == "python-math"
    assert env.max_turns == 3
    assert env.tool_timeout_s == pytest.approx(15.0)
    assert len(env.dataset) == 3 and len(env.eval_dataset) == 2


async def test_check_environment() -> None:
    testing = verifiers.testing
    if not hasattr(testing, "check_environment"):
        pytest.skip("verifiers.testing.check_environment is not available yet")
    check = getattr(testing, "a_check_environment", None) or testing.check_environment
    report = check(small_env())
    if inspect.isawaitable(report):
        report = await report
    assert getattr(report, "ok", True), report
