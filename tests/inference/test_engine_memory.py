"""The engine's KV memory: a token budget for admission, chunked prefill, a preallocated cache, OOM shedding.

The reference for every output is the model itself (``model.generate`` greedy) or the same
request alone: memory management must never change what a request gets.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from verifiers.errors import OverlongPromptError, ServerError  # noqa: E402
from verifiers.inference.engine import InferenceEngine  # noqa: E402
from verifiers.inference.engine.fast_decode import FastDecoder  # noqa: E402
from verifiers.inference.engine.sampling import SamplingParams  # noqa: E402
from verifiers.models.tiny import TinyModelSpec, build_tiny_model  # noqa: E402

PROMPTS = [[5 + i, 6, 7 + i, 8, 9][: 1 + i % 5] * (1 + i % 3) for i in range(10)]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def model_tok() -> tuple[Any, Any]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=32))
    with torch.no_grad():  # a wider spread than the default init, so prompts lead to different outputs
        for p in model.parameters():
            p.normal_(0, 0.2)
    return model, tok


def _reference(model: Any, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def _together(engine: InferenceEngine, jobs: list[tuple[list[int], SamplingParams]]) -> list[Any]:
    """Submit the jobs in order while the engine is held, so they are admitted together (as far as they fit)."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        with engine.paused():
            futures = []
            for p, sp in jobs:  # one at a time: the queue keeps this order
                futures.append(pool.submit(engine.generate_sync, p, sp))
                time.sleep(0.02)
            time.sleep(0.05)
        return [f.exception(timeout=60) or f.result() for f in futures]


@pytest.mark.parametrize("kw", [{}, {"max_prefill_tokens": 3}, {"max_kv_tokens": 60}, {"max_prefill_tokens": 1}])
def test_outputs_equal_model_generate_under_every_memory_setting(model_tok, kw: dict[str, Any]) -> None:
    model, tok = model_tok
    expected = [_reference(model, p, 12) for p in PROMPTS]
    with InferenceEngine(model, tok, **kw) as engine:
        outs = _together(engine, [(p, GREEDY) for p in PROMPTS])
    assert [o.outputs[0].token_ids for o in outs] == expected
    if "max_prefill_tokens" in kw:
        assert engine.stats["prefill_forwards"] > engine.stats["prefills"]  # prompts were cut into chunks


def test_logprobs_match_a_plain_forward(model_tok) -> None:
    model, tok = model_tok
    prompt = PROMPTS[7]
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=True, top_logprobs=2)
    with InferenceEngine(model, tok, max_prefill_tokens=2) as engine:
        out = _together(engine, [(prompt, params), (PROMPTS[1], params)])[0].outputs[0]
    ids = torch.tensor([prompt + out.token_ids])
    lps = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    want = [lps[len(prompt) - 1 + i, t].item() for i, t in enumerate(out.token_ids)]
    assert out.logprobs == pytest.approx(want, abs=1e-4)


def test_the_budget_bounds_rows_and_cache_bytes(model_tok) -> None:
    model, tok = model_tok
    budget = 64  # worst case per row: 3 prompt + 12 max_tokens = 15 -> 4 rows at a time
    with InferenceEngine(model, tok, max_kv_tokens=budget) as engine:
        outs = _together(engine, [([5, 6, 7], GREEDY) for _ in range(9)])
    assert all(len(o.outputs[0].token_ids) == 12 for o in outs)
    assert engine.stats["max_batch"] == 4
    per_token = 2 * 2 * 2 * (32 // 4) * 4  # K and V x layers x kv heads x head_dim x float32
    assert 0 < engine.stats["peak_kv_bytes"] <= budget * per_token
    assert engine.stats["kv_bytes"] == 0  # an idle engine holds no cache


def test_a_large_request_is_not_overtaken_by_later_small_ones(model_tok) -> None:
    model, tok = model_tok
    small = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    big = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    with InferenceEngine(model, tok, max_kv_tokens=60) as engine:
        admitted: list[int] = []
        admit = engine._admit

        def spy() -> list[Any]:
            new = admit()
            admitted.extend(len(r.prompt_ids) for r in new)
            return new

        engine._admit = spy  # type: ignore[method-assign]
        jobs = [([5, 6], small), ([5] * 20, big), *[([7, 8, 9], small)] * 4]
        outs = _together(engine, jobs)
    assert not any(isinstance(o, BaseException) for o in outs)
    assert admitted.index(20) < admitted.index(3)  # the big one ran before any later small request


def test_a_request_that_can_never_fit_fails_alone_with_a_clear_message(model_tok) -> None:
    model, tok = model_tok
    with InferenceEngine(model, tok, max_kv_tokens=40) as engine:
        with pytest.raises(OverlongPromptError, match="max_kv_tokens=40"):
            engine.generate_sync([5, 6, 7], SamplingParams(max_tokens=20), n=2)
        out = engine.generate_sync(PROMPTS[2], GREEDY)
    assert out.outputs[0].token_ids == _reference(model, PROMPTS[2], 12)


def _raise_oom() -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")


def _failing_forward(model: Any, should_fail: Any) -> Any:
    forward = model.forward

    def run(*args: Any, **kwargs: Any) -> Any:
        if should_fail(kwargs):
            _raise_oom()
        return forward(*args, **kwargs)

    return run


def _inject_oom(monkeypatch: Any, model: Any, fast_decode: bool, method: str, should_fail: Any) -> None:
    """An injected OOM wherever ``should_fail({"input_ids": ...})``: in `FastDecoder`'s ``method`` (the
    engine's own decoding step or prefill, `verifiers.inference.engine.fast_decode`) or in the model's forward."""
    if not fast_decode:
        monkeypatch.setattr(model, "forward", _failing_forward(model, should_fail))
        return
    real = getattr(FastDecoder, method)

    def failing(self: FastDecoder, input_ids: Any, *args: Any) -> Any:
        if should_fail({"input_ids": input_ids}):
            _raise_oom()
        return real(self, input_ids, *args)

    monkeypatch.setattr(FastDecoder, method, failing)


MARK = 90  # a token only the doomed request's prompt holds


@pytest.mark.parametrize("fast_decode", [True, False], ids=["fast-decode", "transformers-forward"])
def test_an_oom_in_prefill_fails_only_the_request_that_did_not_fit(model_tok, monkeypatch, fast_decode: bool) -> None:
    model, tok = model_tok
    expected = [_reference(model, p, 12) for p in PROMPTS[:4]]

    def doomed(kw: dict[str, Any]) -> bool:
        return bool((kw["input_ids"] == MARK).any())

    _inject_oom(monkeypatch, model, fast_decode, "prefill", doomed)  # the engine's own prefill is plain ops
    with InferenceEngine(model, tok, fast_decode=fast_decode) as engine:
        assert (engine._decoder.fast is not None) == fast_decode
        outs = _together(engine, [(p, GREEDY) for p in PROMPTS[:4]] + [([MARK, 5, 6], GREEDY)])
        assert engine.generate_sync(PROMPTS[0], GREEDY).outputs[0].token_ids == expected[0]  # still serving
    assert isinstance(outs[4], ServerError) and "max_kv_tokens" in str(outs[4])
    assert [o.outputs[0].token_ids for o in outs[:4]] == expected
    assert engine.stats["oom_failures"] >= 1


@pytest.mark.parametrize("fast_decode", [True, False], ids=["fast-decode", "transformers-forward"])
def test_an_oom_while_decoding_sheds_the_newest_request_and_the_rest_finish(model_tok, monkeypatch,
                                                                            fast_decode: bool) -> None:
    model, tok = model_tok
    long = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    expected = _reference(model, PROMPTS[3], 30)
    state = {"armed": True}

    def fail_once_with_three_rows(kw: dict[str, Any]) -> bool:
        hit = state["armed"] and kw["input_ids"].numel() == 3 and kw["input_ids"].shape[0] == 3  # 3 rows, 1 token
        if hit:
            state["armed"] = False
        return hit

    _inject_oom(monkeypatch, model, fast_decode, "__call__", fail_once_with_three_rows)
    with InferenceEngine(model, tok, fast_decode=fast_decode) as engine:
        assert (engine._decoder.fast is not None) == fast_decode
        first = _together(engine, [(PROMPTS[3], long), (PROMPTS[4], long)])
        assert first[0].outputs[0].token_ids == expected
        # No sleeps: a and b are admitted together, and c joins between two of their steps while
        # they still have most of their tokens to go (a fast decoding step must not outrun it).
        longer = SamplingParams(temperature=0, max_tokens=120, ignore_eos=True)
        with ThreadPoolExecutor(3) as pool:
            with engine.paused():
                a = pool.submit(engine.generate_sync, PROMPTS[3], longer)
                b = pool.submit(engine.generate_sync, PROMPTS[5], longer)
                _wait_queued(engine, 2)
            while engine.stats["tokens"] < 2 * 30 + 2 * 2:  # a and b have decoded together
                time.sleep(0.001)
            with engine.paused():
                c = pool.submit(engine.generate_sync, PROMPTS[6], longer)
                _wait_queued(engine, 1)
            results = [f.exception(timeout=60) or f.result() for f in (a, b, c)]
    failed = [r for r in results if isinstance(r, ServerError)]
    assert len(failed) == 1 and isinstance(results[2], ServerError)  # the newest one
    assert results[0].outputs[0].token_ids == _reference(model, PROMPTS[3], 120)
    assert results[1].outputs[0].token_ids == _reference(model, PROMPTS[5], 120)


def _wait_queued(engine: InferenceEngine, n: int) -> None:
    """Until ``n`` requests wait in the engine's queue (the engine is paused by the caller)."""
    deadline = time.monotonic() + 30
    while len(engine._waiting) < n:
        assert time.monotonic() < deadline, "the requests never reached the engine's queue"
        time.sleep(0.001)


def test_decoding_writes_the_cache_in_place(model_tok) -> None:
    """Once capacity is reached, steps and leaving rows reuse the same buffers (no concatenation, no copy)."""
    model, tok = model_tok
    with InferenceEngine(model, tok) as engine:
        ptrs: list[int] = []
        step = engine._step

        def spy(new: list[Any]) -> None:
            step(new)
            if engine._decoder.kv.keys:
                ptrs.append(engine._decoder.kv.keys[0].data_ptr())

        engine._step = spy  # type: ignore[method-assign]
        jobs = [(p, SamplingParams(temperature=0, max_tokens=6 + 4 * i, ignore_eos=True)) for i, p in
                enumerate(PROMPTS[:5])]
        _together(engine, jobs)
    assert len(ptrs) > 20 and len(set(ptrs)) <= 2  # at most one growth after the first allocation


def test_one_host_copy_per_decoding_step_on_a_fake_gpu(model_tok) -> None:
    fake = pytest.importorskip("trainers.testing.fake_cuda")
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=32))
    mixed = [
        ([5, 6, 7], SamplingParams(temperature=0, max_tokens=6, logprobs=True, top_logprobs=3)),
        ([9, 10], SamplingParams(temperature=1.0, top_p=0.9, top_k=20, max_tokens=6, seed=3, logprobs=True)),
        ([11, 12], SamplingParams(temperature=0.8, min_p=0.05, repetition_penalty=1.3, max_tokens=6, seed=5)),
        ([13, 14], SamplingParams(temperature=1.0, max_tokens=6, repetition_penalty=0.9)),
    ]
    with fake.fake_cuda() as check:
        model.to(fake.CUDA)
        engine = InferenceEngine(model, tok, seed=0)
        per_step: list[tuple[bool, int]] = []
        loop, step = engine._run, engine._step

        def run() -> None:
            with check:
                loop()

        def counted(new: list[Any]) -> None:
            before = check.host_syncs
            step(new)
            per_step.append((bool(new), check.host_syncs - before))

        engine._run, engine._step = run, counted  # type: ignore[method-assign]
        with engine:
            _together(engine, mixed)
    decode_only = [n for has_new, n in per_step if not has_new]
    assert decode_only and max(decode_only) <= 1, per_step



def test_on_a_cpu_the_default_budget_is_capped_by_the_available_ram(model_tok, monkeypatch) -> None:
    """Uncapped, a server asked for many long replies grew its cache past the machine's RAM (12 GB for SmolLM2)."""
    import psutil

    from verifiers.inference.engine import kv_budget

    model, tok = model_tok
    real = kv_budget.available_bytes()
    assert real is not None and 0 < real <= psutil.virtual_memory().total  # Linux: MemAvailable
    per = kv_budget.kv_bytes_per_token(model)
    monkeypatch.setattr(kv_budget, "available_bytes", lambda: 2 * 100 * per)  # half of it: 100 tokens
    with InferenceEngine(model, tok, max_batch_size=256, max_model_len=64) as engine:
        assert engine.max_kv_tokens == 100
        outs = _together(engine, [([5, 6, 7], GREEDY) for _ in range(9)])  # 15 tokens a row at worst: 6 at once
    assert all(len(o.outputs[0].token_ids) == 12 for o in outs)  # the rest waited their turn, none failed
    assert engine.stats["max_batch"] == 6
    monkeypatch.setattr(kv_budget, "available_bytes", lambda: 1)  # never below one full-length row
    with InferenceEngine(model, tok, max_batch_size=256, max_model_len=64) as engine:
        assert engine.max_kv_tokens == 64
    monkeypatch.setattr(kv_budget, "available_bytes", lambda: 1 << 50)  # plenty: the worst case itself
    with InferenceEngine(model, tok, max_batch_size=256, max_model_len=64) as engine:
        assert engine.max_kv_tokens == 256 * 64
    with InferenceEngine(model, tok, max_kv_tokens=123) as engine:  # an explicit budget is kept as given
        assert engine.max_kv_tokens == 123
