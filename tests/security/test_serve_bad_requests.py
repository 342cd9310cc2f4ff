"""One bad request must not fail the others: validation before queueing, per-request failure in a step.

Before the fix, a token id outside the vocabulary (a completions prompt ``[999999]``, or a
``stop_token_ids`` entry used with ``min_tokens``) reached the engine thread; its batched
step raised and the engine failed every active and waiting request with a plain-text 500.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from .conftest import assert_openai_error, post_json, request, serving

pytest.importorskip("torch")
openai = pytest.importorskip("openai")

BAD_BODIES: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/completions", {"model": "tiny", "prompt": [999999], "max_tokens": 4}, "prompt"),
    ("/v1/completions", {"model": "tiny", "prompt": [-3], "max_tokens": 4}, "prompt"),
    ("/v1/completions", {"model": "tiny", "prompt": [[5, 6], [7, 10**9]], "max_tokens": 4}, "prompt"),
    ("/v1/completions", {"model": "tiny", "prompt": "abc", "max_tokens": 4, "min_tokens": 2,
                         "stop_token_ids": [10**6]}, "stop_token_ids"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                              "min_tokens": 3, "stop_token_ids": [-1]}, "stop_token_ids"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                              "logit_bias": {"999999": 5}}, "logit_bias"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                              "repetition_penalty": float("inf")}, "repetition_penalty"),
    ("/detokenize", {"model": "tiny", "tokens": [999999]}, "tokens"),
]


@pytest.fixture(scope="module")
def server(engine: Any):
    with serving(engine) as srv:
        yield srv


@pytest.mark.parametrize(("path", "body", "param"), BAD_BODIES, ids=[f"{p}-{q}" for p, _, q in BAD_BODIES])
def test_bad_values_are_400_json_naming_the_field(server: Any, path: str, body: dict[str, Any], param: str) -> None:
    status, resp = post_json(server.base, path, body)
    assert_openai_error(status, resp, 400, param)


def test_bad_requests_leave_concurrent_streams_running(server: Any, engine: Any) -> None:
    """Four greedy streams run while every bad body is sent; all four finish with their full length."""
    client = openai.OpenAI(base_url=f"{server.base}/v1", api_key="x", max_retries=0, timeout=120)
    max_tokens = 300
    started = [threading.Event() for _ in range(4)]
    results: list[Any] = [None] * 4

    def stream(k: int) -> None:
        try:
            chunks = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": f"stream {k}"}], temperature=0,
                max_tokens=max_tokens, stream=True, extra_body={"ignore_eos": True, "return_token_ids": True})
            ids: list[int] = []
            finish = None
            for ch in chunks:
                for c in ch.choices:
                    ids += list(getattr(c, "token_ids", None) or [])
                    finish = c.finish_reason or finish
                if len(ids) >= 2:
                    started[k].set()
            results[k] = (len(ids), finish)
        except Exception as exc:  # recorded, asserted below
            results[k] = exc
        finally:
            started[k].set()

    threads = [threading.Thread(target=stream, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(60)
    failures_before = engine.stats.get("request_failures", 0)
    for path, body, param in BAD_BODIES:
        status, resp = post_json(server.base, path, body)
        assert_openai_error(status, resp, 400, param)
    for t in threads:
        t.join(120)
    assert results == [(max_tokens, "length")] * 4
    assert engine.stats.get("request_failures", 0) == failures_before  # nothing reached the engine


def test_a_failing_step_fails_only_its_own_request(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault validation cannot see (here: a prefill that raises for one prompt) fails that request only."""
    from verifiers.inference.engine.sampling import SamplingParams

    poison = (9, 9, 9, 9, 9, 9, 9)
    original = engine._decoder.prefill

    def prefill(plan: Any, first_slot: int) -> Any:
        if poison in plan.prompts:
            raise ValueError("simulated fault in this request's prefill")
        return original(plan, first_slot)

    monkeypatch.setattr(engine._decoder, "prefill", prefill)
    params = SamplingParams(temperature=0, max_tokens=120, ignore_eos=True)
    out: dict[str, Any] = {}

    def run(name: str, prompt: list[int]) -> None:
        try:
            out[name] = engine.generate_sync(prompt, params)
        except Exception as exc:
            out[name] = exc

    good = [threading.Thread(target=run, args=(f"good{k}", [5 + k, 6, 7])) for k in range(3)]
    for t in good:
        t.start()
    time.sleep(0.05)
    bad = [threading.Thread(target=run, args=(f"bad{k}", list(poison))) for k in range(2)]
    late = threading.Thread(target=run, args=("late", [11, 12, 13]))
    for t in [*bad, late]:
        t.start()
    for t in [*good, *bad, late]:
        t.join(120)
    for name in ("good0", "good1", "good2", "late"):
        assert not isinstance(out[name], Exception), (name, out[name])
        assert len(out[name].outputs[0].token_ids) == 120
    for name in ("bad0", "bad1"):
        assert isinstance(out[name], Exception) and "simulated fault" in str(out[name])
    # The engine is still serving afterwards.
    monkeypatch.setattr(engine._decoder, "prefill", original)
    assert len(engine.generate_sync([5, 6], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
               .outputs[0].token_ids) == 3


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/nope", 404), ("GET", "/v1/chat/completions", 405), ("DELETE", "/health", 405)])
def test_framework_errors_are_openai_json(server: Any, method: str, path: str, status: int) -> None:
    assert_openai_error(*request(server.base, method, path), status)


def test_engine_crash_is_500_json_not_text(server: Any, engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(server.server.config.app.state.api, "models", boom)
    assert_openai_error(*request(server.base, "GET", "/v1/models"), 500)
