"""The serving engine's grouped-query attention gives the same logits as transformers' SDPA path."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verifiers.inference.engine.attention import NAME, use_gqa_attention  # noqa: E402
from verifiers.inference.engine.loading import load_model_and_tokenizer  # noqa: E402
from verifiers.models.tiny import TinyModelSpec, save_tiny_model  # noqa: E402


def test_same_logits_with_padding_and_a_cache(tmp_path: Path) -> None:
    path = save_tiny_model(tmp_path / "m", TinyModelSpec(hidden_size=64, num_attention_heads=4, num_key_value_heads=2))
    ref, _ = load_model_and_tokenizer(path, with_tokenizer=False)
    fast, _ = load_model_and_tokenizer(path, with_tokenizer=False)
    assert use_gqa_attention(fast) and fast.config._attn_implementation == NAME
    ids = torch.randint(5, 100, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding, as the engine batches rows
    with torch.no_grad():
        a, b = ref(input_ids=ids, attention_mask=mask), fast(input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(a.logits, b.logits, rtol=0, atol=1e-5)
        nxt = torch.randint(5, 100, (3, 1))
        mask2 = torch.cat([mask, torch.ones_like(nxt)], 1)
        a2 = ref(input_ids=nxt, attention_mask=mask2, past_key_values=a.past_key_values)
        b2 = fast(input_ids=nxt, attention_mask=mask2, past_key_values=b.past_key_values)
        torch.testing.assert_close(a2.logits, b2.logits, rtol=0, atol=1e-5)


def test_left_alone_without_grouped_heads(tmp_path: Path) -> None:
    path = save_tiny_model(tmp_path / "m", TinyModelSpec(hidden_size=64, num_attention_heads=2, num_key_value_heads=2))
    model, _ = load_model_and_tokenizer(path, with_tokenizer=False)
    assert not use_gqa_attention(model) and model.config._attn_implementation == "sdpa"
