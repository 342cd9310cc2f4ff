"""Continuous batching: concurrent requests share forward passes and still get their solo results.

Greedy and seeded outputs do not depend on what else is in the batch, so the reference
for a concurrent request is the same request sent alone. ``engine.stats`` counts decoding
steps and decoded rows; more rows than steps means several sequences shared a step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import openai
import pytest

from verifiers.errors import ConfigError, OverlongPromptError
from verifiers.inference.engine import InferenceEngine
from verifiers.inference.engine.sampling import RowSampling, SamplingParams, process_logits

MODEL = "tiny"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def prompts(n: int) -> list[str]:
    return [f"{WORDS[i % len(WORDS)]} {i}" for i in range(n)]


async def ask(client: openai.AsyncOpenAI, text: str, max_tokens: int, **kw: Any) -> list[int]:
    extra = {"return_token_ids": True, **kw.pop("extra_body", {})}
    r = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=max_tokens, extra_body=extra,
        **{"temperature": 0, **kw},
    )
    return list(r.choices[0].token_ids)


async def test_32_concurrent_requests_equal_their_solo_results(engine, aclient) -> None:
    texts = prompts(32)
    lengths = [4 + (i * 7) % 16 for i in range(32)]
    engine.stats["max_batch"] = 0
    solo = [await ask(aclient, t, m) for t, m in zip(texts, lengths, strict=True)]
    assert engine.stats["max_batch"] == 1
    together = await asyncio.gather(*[ask(aclient, t, m) for t, m in zip(texts, lengths, strict=True)])
    assert together == solo
    assert engine.stats["max_batch"] > 1
    assert len({tuple(s) for s in solo}) > 16  # the prompts really lead to different outputs


async def test_seeded_sampling_does_not_depend_on_batch_neighbours(aclient) -> None:
    kw = {"temperature": 1.0, "seed": 77, "extra_body": {"ignore_eos": True}}
    alone = await ask(aclient, "seeded", 12, **kw)
    crowd = await asyncio.gather(
        ask(aclient, "seeded", 12, **kw),
        *[ask(aclient, t, 10, temperature=1.0) for t in prompts(6)],
    )
    assert crowd[0] == alone


async def test_requests_join_a_running_batch_between_steps(engine, aclient) -> None:
    long_text, texts = "a long one", prompts(6)
    long_solo = await ask(aclient, long_text, 120, extra_body={"ignore_eos": True})
    solo = [await ask(aclient, t, 10) for t in texts]
    steps0, tokens0 = engine.stats["steps"], engine.stats["tokens"]
    long_task = asyncio.create_task(ask(aclient, long_text, 120, extra_body={"ignore_eos": True}))
    while engine.stats["tokens"] < tokens0 + 5 and not long_task.done():  # the long request is decoding
        await asyncio.sleep(0.005)

    async def late(k: int, text: str) -> list[int]:
        await asyncio.sleep(0.02 * k)
        return await ask(aclient, text, 10)

    joined = await asyncio.gather(*[late(k, t) for k, t in enumerate(texts)])
    assert await long_task == long_solo
    assert joined == solo
    rows, steps = engine.stats["tokens"] - tokens0, engine.stats["steps"] - steps0
    assert rows > steps  # some steps decoded the long request together with late arrivals


async def test_results_finishing_in_one_step_reach_the_loop_in_one_wakeup(engine, monkeypatch) -> None:
    """A GRPO batch ends with every request finishing at once: one cross-thread call, not one per request."""
    loop = asyncio.get_running_loop()
    calls = []
    real = loop.call_soon_threadsafe
    monkeypatch.setattr(loop, "call_soon_threadsafe", lambda *a, **k: calls.append(a) or real(*a, **k))
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    ids = engine.tokenizer.encode("alpha")
    with engine.paused():  # all 16 wait together, so they join one step and finish in one step
        tasks = [asyncio.create_task(engine.generate([*ids, i], params)) for i in range(16)]
        await asyncio.sleep(0)  # each task enqueues its request
    outs = await asyncio.gather(*tasks)
    assert [len(o.outputs[0].token_ids) for o in outs] == [4] * 16
    assert len(calls) == 1, f"{len(calls)} cross-thread calls for 16 results finishing together"


async def test_a_request_abandoned_by_its_client_does_not_break_others(engine, server, aclient) -> None:
    solo = [await ask(aclient, t, 8) for t in prompts(4)]
    tokens0 = engine.stats["tokens"]
    impatient = openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=0.3)
    try:
        results = await asyncio.gather(
            ask(impatient, "never mind", 1500, extra_body={"ignore_eos": True}),
            *[ask(aclient, t, 8) for t in prompts(4)],
            return_exceptions=True,
        )
    finally:
        await impatient.close()
    assert isinstance(results[0], openai.APITimeoutError)
    assert list(results[1:]) == solo
    assert await ask(aclient, prompts(1)[0], 8) == solo[0]
    # The server notices the disconnect and the engine drops the abandoned generation
    # instead of running it to its 1500 tokens.
    await wait_idle(engine)
    assert engine.stats["tokens"] - tokens0 < 1500


async def wait_idle(engine: InferenceEngine, timeout_s: float = 60.0) -> None:
    """Wait until the engine stops producing tokens (no decoding step for 0.3 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        before = engine.stats["tokens"]
        await asyncio.sleep(0.3)
        if engine.stats["tokens"] == before:
            return
        assert time.monotonic() < deadline, "the engine never went idle"


# -- the engine without HTTP ----------------------------------------------------------------
def test_generate_sync_from_many_threads(engine, ref) -> None:
    texts = prompts(8)
    ids = [ref.chat_ids([{"role": "user", "content": t}]) for t in texts]
    params = SamplingParams(temperature=0, max_tokens=8)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda p: engine.generate_sync(p, params).outputs[0].token_ids, ids))
    assert outs == [ref.greedy(p, 8) for p in ids]


async def test_requests_submitted_in_one_loop_iteration_share_one_prefill(tiny_dir, ref) -> None:
    """A trainer's batch reaches the engine together, even when submitting it takes a while.

    The second request is submitted 50 ms after the first, in the same event-loop iteration (a
    ``time.sleep`` lets the engine thread run meanwhile): handed over at once, the first request
    would start a step alone and the second would be prefilled a step later.
    """
    a, b = (ref.chat_ids([{"role": "user", "content": t}]) for t in prompts(2))
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)

    async def after_a_stall() -> Any:
        time.sleep(0.05)
        return await eng.generate(b, params)

    with InferenceEngine.from_pretrained(tiny_dir) as eng:
        outs = await asyncio.gather(eng.generate(a, params), after_a_stall())
        assert eng.stats["prefills"] == 1 and eng.stats["steps"] == 6
    assert [o.outputs[0].token_ids for o in outs] == [ref.greedy(a, 6), ref.greedy(b, 6)]


async def test_a_request_submitted_as_the_engine_stops_fails_instead_of_hanging(tiny_dir) -> None:
    eng = InferenceEngine.from_pretrained(tiny_dir).start()
    pending = asyncio.ensure_future(eng.generate([5, 6, 7], SamplingParams(max_tokens=2)))
    await asyncio.sleep(0)  # submitted: the hand-over waits for the end of this iteration
    eng.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        await asyncio.wait_for(pending, 30)


def test_n_larger_than_the_batch_cap_still_runs(tiny_dir) -> None:
    with InferenceEngine.from_pretrained(tiny_dir, max_batch_size=2) as eng:
        out = eng.generate_sync([5, 6, 7], SamplingParams(temperature=1.0, seed=1, max_tokens=4), n=3)
    assert [o.index for o in out.outputs] == [0, 1, 2]
    assert all(len(o.token_ids) <= 4 for o in out.outputs)


def test_engine_must_be_started(tiny_dir) -> None:
    eng = InferenceEngine.from_pretrained(tiny_dir)
    with pytest.raises(RuntimeError, match="start"):
        eng.generate_sync([5, 6], SamplingParams(max_tokens=2))


def test_check_request_rejects_empty_and_overlong_prompts(engine) -> None:
    with pytest.raises(ConfigError, match="empty"):
        engine.check_request([], SamplingParams())
    with pytest.raises(OverlongPromptError, match="maximum context length"):
        engine.check_request([5] * (engine.max_model_len + 1), SamplingParams())
    assert engine.check_request([5] * 10, SamplingParams()) == engine.max_model_len - 10
    assert engine.check_request([5] * 10, SamplingParams(max_tokens=7)) == 7


def test_stop_fails_pending_requests_instead_of_hanging(tiny_dir) -> None:
    eng = InferenceEngine.from_pretrained(tiny_dir).start()
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            eng.generate_sync([5, 6, 7], SamplingParams(max_tokens=1500, ignore_eos=True))
        except RuntimeError as exc:
            result["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 60
    while eng.stats["tokens"] < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    eng.stop()
    t.join(timeout=30)
    assert not t.is_alive()
    assert "stopped" in str(result.get("error"))


# -- the logits processors on hand-made distributions -------------------------------------------
def _row(**kw: Any) -> RowSampling:
    base = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
    return RowSampling(**{**base, **kw})


def _kept(logits: list[float], **kw: Any) -> list[int]:
    import torch

    out = process_logits(torch.tensor([logits]), [_row(**kw)])
    return [i for i, v in enumerate(out[0].tolist()) if v != float("-inf")]


def test_top_p_keeps_the_smallest_prefix_reaching_the_mass() -> None:
    import math

    logits = [math.log(p) for p in (0.5, 0.3, 0.15, 0.05)]
    assert _kept(logits, top_p=0.5) == [0]
    assert _kept(logits, top_p=0.6) == [0, 1]
    assert _kept(logits, top_p=0.9) == [0, 1, 2]
    assert _kept(logits, top_p=1.0) == [0, 1, 2, 3]


def test_top_k_and_min_p_filters() -> None:
    import math

    logits = [math.log(p) for p in (0.4, 0.3, 0.2, 0.1)]
    assert _kept(logits, top_k=2) == [0, 1]
    assert _kept(logits, min_p=0.5) == [0, 1, 2]  # p >= 0.5 * 0.4
    assert _kept(logits, min_p=0.7) == [0, 1]  # p >= 0.28


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    import torch

    row = _row(repetition_penalty=2.0)
    row.seen = {0, 1}
    out = process_logits(torch.tensor([[4.0, -1.0, 3.0]]), [row])
    assert out[0].tolist() == [2.0, -2.0, 3.0]


def test_rows_are_processed_independently() -> None:
    import torch

    logits = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    out = process_logits(logits, [_row(top_k=1), _row(temperature=2.0)])
    assert out[0].tolist() == [3.0, float("-inf"), float("-inf")]
    assert out[1].tolist() == [1.5, 1.0, 0.5]


@pytest.mark.parametrize("cleanup", [False, True])
def test_streamed_text_is_the_tokenizers_decode(cleanup: bool) -> None:
    """Streamed rows are decoded on every step, by the Rust tokenizer directly where that is all
    ``tokenizer.decode`` does; with ``clean_up_tokenization_spaces`` (a Python pass) by ``decode`` itself."""
    import torch

    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                                num_attention_heads=2, num_key_value_heads=1))
    tok.clean_up_tokenization_spaces = cleanup
    engine = InferenceEngine(model, tok)
    decode = engine._decoder.decode
    assert (decode == engine._decode) is cleanup
    ids = [*tok.encode("it's a test , ok ."), *tok.all_special_ids, *tok.encode("héllo")]
    assert decode(ids) == tok.decode(ids, skip_special_tokens=True)
    if cleanup:  # the cleanup pass did change this text, so the direct path would have been wrong here
        assert decode(ids) != tok.backend_tokenizer.decode(ids, skip_special_tokens=True)

    async def stream() -> tuple[str, list[int]]:
        text, token_ids = "", []
        params = SamplingParams(temperature=1.0, seed=3, max_tokens=24, ignore_eos=True)
        async for item in engine.stream(tok.encode("say"), params):
            for delta in item if isinstance(item, list) else []:
                text += delta.text
                token_ids += delta.token_ids
        return text, token_ids

    with engine:
        text, token_ids = asyncio.run(stream())
    assert len(token_ids) == 24 and text == tok.decode(token_ids, skip_special_tokens=True)
