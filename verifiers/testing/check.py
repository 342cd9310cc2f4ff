"""check_environment: one conformance check run over every environment.

Environment authors call it in their test suite; we run it over every package
in ``environments/``. It checks the static contract (dataset rows, rubric,
tool schemas) and then runs real rollouts over HTTP against a scripted server,
once with well-behaved replies and once with garbage (nonsense text, malformed
tool calls), asserting that every rollout comes back as a finite, serialisable,
scored result and that nothing crashes. Last, replies made only of chat markup tokens
(``<tool_call>`` four times, ``<think></think>``, ``<|im_end|>``...) must earn no more than an
empty reply: one sampled token is not eleven characters of answer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from verifiers.clients.openai_client import make_client
from verifiers.envs.environment import Environment
from verifiers.errors import VFError
from verifiers.parsers.markup import MARKUP_TAGS
from verifiers.testing.server import ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript
from verifiers.types import GenerateOutputs

_VALID_ROLES = {"system", "user", "assistant", "tool", "developer"}


class EnvironmentCheckError(VFError, AssertionError):
    """The environment breaks the contract; the message lists every problem found."""


@dataclass
class CheckReport:
    env: str
    rollouts: int = 0
    reward_funcs: list[str] = field(default_factory=list)
    mean_reward: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _garbage_script(env: Environment) -> ServerScript:
    replies = [ScriptedReply(turn=1, content="}{<answer></think> \x00 null ✓")]
    tools = env.oai_tools or []
    if tools:
        name = tools[0]["function"]["name"]
        replies.insert(
            0, ScriptedReply(turn=0, content=None, tool_calls=[ScriptedToolCall(name=name, arguments="{bad")])
        )
        replies.insert(
            1,
            ScriptedReply(
                turn=1, content=None, tool_calls=[ScriptedToolCall(name="no_such_tool", arguments="{}")]
            ),
        )
    replies.append(ScriptedReply(content=""))
    return ServerScript(replies=replies)


MARKUP_REPLIES = (
    "<tool_call>" * 4,
    "<think></think>",
    "<think>\n</think>",
    "<|im_start|><|im_end|><|endoftext|>",
    "".join(MARKUP_TAGS) + "<|im_end|><|eot_id|>",
)
"""Replies a model can sample as a handful of tokens that a user reads as nothing."""


async def _check_markup(env: Environment, rows: Any, client: Any, server: ScriptedServer, report: CheckReport) -> None:
    """A reply made of markup tokens earns no more, on any row, than an empty reply."""
    server.set_script(ServerScript(replies=[ScriptedReply(content="")]))
    empty = await env.a_generate(rows, client, "scripted", rollouts_per_example=1)
    floor = {r.example_id: r.reward for r in empty.results}
    for text in MARKUP_REPLIES:
        server.set_script(ServerScript(replies=[ScriptedReply(content=text)]))
        out = await env.a_generate(rows, client, "scripted", rollouts_per_example=1)
        report.rollouts += len(out.results)
        for r in out.results:
            base = floor.get(r.example_id, 0.0)
            if r.reward > base + 1e-9:
                paid = {k: round(v, 4) for k, v in r.metrics.items() if v}
                report.problems.append(
                    f"markup replies: {text!r} earns {r.reward:.4f} on row {r.example_id}, an empty reply "
                    f"{base:.4f} ({paid}); score the text a user reads (vf.reply_text / vf.strip_markup)")


def _check_static(env: Environment, report: CheckReport) -> None:
    p = report.problems
    if env.dataset is None and env.eval_dataset is None:
        p.append("no dataset and no eval_dataset")
    for name, data in (("dataset", env.dataset), ("eval_dataset", env.eval_dataset)):
        if data is None:
            continue
        for i, row in enumerate(data.rows[:50]):
            prompt = row["prompt"]
            if env.message_type == "chat":
                if not isinstance(prompt, list) or not prompt:
                    p.append(f"{name}[{i}].prompt is not a non-empty message list")
                elif any(m.get("role") not in _VALID_ROLES for m in prompt):
                    p.append(f"{name}[{i}].prompt has a message with an invalid role")
            elif not isinstance(prompt, str):
                p.append(f"{name}[{i}].prompt must be a string in completion mode")
            try:
                json.dumps(row["info"])
            except (TypeError, ValueError):
                p.append(f"{name}[{i}].info is not JSON-serialisable")
    names = env.rubric.get_reward_func_names()
    report.reward_funcs = names
    if not names:
        p.append("the rubric has no reward functions")
    if len(set(names)) != len(names):
        p.append(f"reward function names are not unique: {names}")
    for tool in env.oai_tools or []:
        try:
            json.dumps(tool)
            fn = tool["function"]
            if not fn.get("name") or fn.get("parameters", {}).get("type") != "object":
                p.append(f"tool schema {fn.get('name')!r} lacks a name or an object 'parameters'")
        except (TypeError, ValueError, KeyError) as exc:
            p.append(f"tool schema is not valid: {exc}")


def _check_outputs(
    label: str, out: GenerateOutputs, expected: int, names: list[str], report: CheckReport
) -> None:
    p = report.problems
    if len(out.results) != expected:
        p.append(f"{label}: expected {expected} results, got {len(out.results)}")
    states = {id(s) for s in out.state}
    if len(states) != len(out.state):
        p.append(f"{label}: rollouts share a state object")
    for r in out.results:
        where = f"{label}: rollout {r.example_id}/{r.rollout_index}"
        if r.error is not None and r.error.where != "model":
            p.append(f"{where} failed in the environment: {r.error.type}: {r.error.message}")
        if not math.isfinite(r.reward):
            p.append(f"{where} has a non-finite reward {r.reward}")
        missing = [n for n in names if n not in r.metrics]
        if missing:
            p.append(f"{where} lacks metrics {missing}")
        if isinstance(r.completion, list) and any(m.get("role") not in _VALID_ROLES for m in r.completion):
            p.append(f"{where} completion has a message with an invalid role")
        for e in r.scoring_errors:
            p.append(f"{where} reward function error {e.where}: {e.type}: {e.message}")
        try:
            r.model_dump_json()
        except Exception as exc:
            p.append(f"{where} is not serialisable: {exc}")


async def a_check_environment(
    env: Environment,
    *,
    script: ServerScript | None = None,
    num_examples: int = 3,
    rollouts_per_example: int = 2,
    check_garbage: bool = True,
    check_markup: bool = True,
    raise_on_problem: bool = True,
) -> CheckReport:
    """Check ``env``; raise `EnvironmentCheckError` listing every problem (or return the report).

    ``check_markup``: replies made of chat markup tokens (`MARKUP_REPLIES`) must not out-earn
    an empty reply on any row (reward hacking a tokenizer's multi-character tokens).
    """
    report = CheckReport(env=env.env_id or type(env).__name__)
    if not isinstance(env, Environment):
        raise EnvironmentCheckError(f"{type(env).__name__} is not a verifiers Environment")
    _check_static(env, report)
    names = report.reward_funcs
    rows = env.get_eval_dataset(num_examples)
    expected = len(rows) * rollouts_per_example
    async with ScriptedServer(script or ServerScript()) as server:
        client = make_client(server.base_url, max_retries=0)
        try:
            out = await env.a_generate(rows, client, "scripted", rollouts_per_example=rollouts_per_example)
            _check_outputs("scripted replies", out, expected, names, report)
            report.rollouts += len(out.results)
            report.mean_reward = sum(out.reward) / max(1, len(out.reward))
            if check_garbage:
                server.set_script(_garbage_script(env))
                bad = await env.a_generate(rows, client, "scripted", rollouts_per_example=1)
                # A reward function must score garbage (0), not raise on it.
                _check_outputs("garbage replies", bad, len(rows), names, report)
                report.rollouts += len(bad.results)
            if check_markup:
                await _check_markup(env, rows, client, server, report)
        finally:
            await client.close()
    if report.problems and raise_on_problem:
        raise EnvironmentCheckError(
            f"environment {report.env!r} failed {len(report.problems)} check(s):\n- "
            + "\n- ".join(report.problems)
        )
    return report


def check_environment(env: Environment, **kwargs: Any) -> CheckReport:
    """Sync wrapper of `a_check_environment` (usable inside a running loop too)."""
    from verifiers.clients.loop import run_sync

    return run_sync(a_check_environment(env, **kwargs))
