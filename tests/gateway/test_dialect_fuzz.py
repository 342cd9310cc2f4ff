"""Hostile bodies at every dialect: a 2xx or the dialect's own 4xx error object, never a framework 500.

Hypothesis generates bodies from the fields each dialect reads (messages, input, system, tools,
tool_choice, sampling parameters) with values of every JSON type, plus deeply nested and
oversized bodies; after each batch a well-formed request must still be answered.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import verifiers as vf
from verifiers.gateway import get_gateway
from verifiers.gateway.validate import MAX_BODY_BYTES, MAX_DEPTH
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

pytestmark = pytest.mark.slow  # a few hundred requests per dialect

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                    max_leaves=12)
ROLES = st.sampled_from(["user", "assistant", "system", "tool", "developer", "bogus", 5, None])
BLOCK = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["text", "image", "tool_use", "tool_result", "input_text", "function_call",
                             "function_call_output", "message", 3]) | JSON,
    "text": JSON, "input": JSON, "content": JSON, "id": JSON, "name": JSON, "tool_use_id": JSON,
    "call_id": JSON, "arguments": JSON, "output": JSON, "role": ROLES})
MESSAGE = st.fixed_dictionaries({}, optional={"role": ROLES, "content": JSON | st.lists(BLOCK, max_size=3),
                                              "tool_calls": JSON, "name": JSON, "tool_call_id": JSON})
TOOL = st.fixed_dictionaries({}, optional={"type": JSON | st.just("function"), "name": JSON, "function": JSON,
                                           "parameters": JSON, "input_schema": JSON, "description": JSON})
COMMON = {"model": JSON | st.just("m"), "stream": JSON, "temperature": JSON, "top_p": JSON, "max_tokens": JSON,
          "tools": JSON | st.lists(TOOL, max_size=2), "tool_choice": JSON, "stop": JSON, "metadata": JSON}
BODIES = {
    "chat/completions": st.fixed_dictionaries({}, optional={**COMMON, "messages": JSON | st.lists(MESSAGE, max_size=3),
                                                           "n": JSON, "logprobs": JSON}),
    "responses": st.fixed_dictionaries({}, optional={**COMMON, "input": JSON | st.lists(BLOCK, max_size=3),
                                                    "instructions": JSON, "previous_response_id": JSON,
                                                    "max_output_tokens": JSON, "text": JSON, "store": JSON,
                                                    "reasoning": JSON}),
    "messages": st.fixed_dictionaries({}, optional={**COMMON, "messages": JSON | st.lists(MESSAGE, max_size=3),
                                                   "system": JSON | st.lists(BLOCK, max_size=2),
                                                   "stop_sequences": JSON, "thinking": JSON, "top_k": JSON}),
}
GOOD = {"chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "responses": {"model": "m", "input": "hi"},
        "messages": {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}}


def _post(url: str, raw: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, data=raw, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        # the SSE body of a stream is read whole: the request is done when it returns
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def well_formed(route: str, status: int, ctype: str, raw: bytes) -> bool:
    """A 2xx, or a 4xx whose JSON is the dialect's error object with a message."""
    if 200 <= status < 300:
        return True
    if not 400 <= status < 500 or "json" not in ctype:
        return False
    body = json.loads(raw)
    if route == "messages":
        return body.get("type") == "error" and isinstance(body.get("error", {}).get("message"), str)
    return isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str)


@pytest.mark.parametrize("route", list(BODIES))
async def test_generated_bodies_get_a_2xx_or_the_dialects_4xx(route: str) -> None:
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content="ok")])) as srv:
        client = vf.make_client(base_url=srv.base_url)
        session = get_gateway().open_session(client, "policy")
        url = f"{session.base_url}/{route}"
        headers = {"Authorization": f"Bearer {session.secret}", "x-api-key": session.secret}
        bad: list[tuple[int, bytes, bytes]] = []

        @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(BODIES[route])
        def throw(body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            status, ctype, answer = _post(url, raw, headers)
            if not well_formed(route, status, ctype, answer):
                bad.append((status, raw[:300], answer[:300]))

        def run() -> list[tuple[int, str, bytes]]:
            throw()
            deep = b'{"messages": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"  # one level too deep
            deeper = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            huge = json.dumps({"model": "m", "input": "x" * (MAX_BODY_BYTES + 10)}).encode()
            limits = [_post(url, raw, headers) for raw in (deep, deeper, huge, b"{not json", b"\xff\xfe")]
            ok = _post(url, json.dumps(GOOD[route]).encode(), headers)
            return [*limits, ok]

        *limits, ok = await asyncio.to_thread(run)
        get_gateway().close_session(session)
        await client.close()
    assert bad == [], bad[:5]
    assert [(s, well_formed(route, s, c, r)) for s, c, r in limits] == [
        (400, True), (400, True), (413, True), (400, True), (400, True)], limits
    assert b"nests deeper than" in limits[0][2] and f"{MAX_BODY_BYTES:,}".encode() in limits[2][2]
    assert ok[0] == 200, ok
