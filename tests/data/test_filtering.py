"""filter_overlong: templated prompt length over processes; template failures count as overlong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from verifiers.data import apply_chat_template, filter_overlong, filtering
from verifiers.errors import ConfigError


def chat(content: str, role: str = "user") -> list[dict[str, Any]]:
    return [{"role": role, "content": content}]


def make_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"prompt": chat("x" * n), "n": n} for n in (1, 9, 3, 12, 5, 0, 7)]
    rows.insert(2, {"prompt": chat("short", role="robot"), "n": -1})  # the template rejects the role
    rows.insert(5, {"prompt": [{"role": "user"}], "n": -2})  # Arrow fills content with None
    return rows


def prompt_len(tokenizer: Any, messages: list[dict[str, Any]]) -> int:
    text = apply_chat_template(tokenizer, messages, tokenize=False)
    return len(tokenizer.encode(text, add_special_tokens=False))


def test_keeps_short_rows_in_order_and_counts_failures(tiny_tokenizer: Any) -> None:
    ds = Dataset.from_list(make_rows())
    limit = prompt_len(tiny_tokenizer, chat("x" * 5))
    kept, stats = filter_overlong(ds, tiny_tokenizer, limit)
    assert kept["n"] == [1, 3, 5, 0]
    assert kept.column_names == ds.column_names
    assert (stats.total, stats.kept, stats.overlong, stats.template_failures) == (9, 4, 3, 2)
    assert stats.dropped == 5 and stats.longest_kept == limit
    assert len(stats.failure_examples) == 2
    assert "row 2" in stats.failure_examples[0] and "unknown role robot" in stats.failure_examples[0]
    assert "row 5" in stats.failure_examples[1] and "message without content" in stats.failure_examples[1]


def test_two_processes_give_the_same_result_with_a_tokenizer_path(
    tiny_tokenizer: Any, tiny_tokenizer_dir: Path
) -> None:
    ds = Dataset.from_list(make_rows() * 3)
    limit = prompt_len(tiny_tokenizer, chat("x" * 7))
    one, stats1 = filter_overlong(ds, tiny_tokenizer, limit, num_proc=1)
    loads_here = filtering._load_tokenizer.cache_info().misses
    two, stats2 = filter_overlong(ds, tiny_tokenizer_dir, limit, num_proc=2)
    assert (
        filtering._load_tokenizer.cache_info().misses == loads_here
    )  # the workers loaded it, not this process
    assert two.to_list() == one.to_list()
    assert stats2 == stats1
    assert stats1.template_failures == 6 and stats1.kept == 15


def test_tools_count_toward_the_prompt_length(tiny_tokenizer: Any) -> None:
    tools = [{"type": "function", "function": {"name": "search"}}]
    ds = Dataset.from_list(
        [{"prompt": chat("hello"), "tools": '[{"type": "function", "function": {"name": "search"}}]'}]
    )
    bare = prompt_len(tiny_tokenizer, chat("hello"))
    kept, _ = filter_overlong(ds, tiny_tokenizer, bare)
    assert len(kept) == 1
    kept, stats = filter_overlong(ds, tiny_tokenizer, bare, tools=tools)
    assert len(kept) == 0 and stats.overlong == 1
    kept, stats = filter_overlong(ds, tiny_tokenizer, bare, tools_key="tools")
    assert len(kept) == 0 and stats.overlong == 1


def test_plain_text_prompts_are_encoded_as_is(tiny_tokenizer: Any) -> None:
    ds = Dataset.from_list([{"text": "abcd"}, {"text": "abcdefgh"}])
    kept, stats = filter_overlong(ds, tiny_tokenizer, 4, prompt_key="text")
    assert kept["text"] == ["abcd"] and stats.template_failures == 0


def test_tokenizer_without_template_drops_everything_as_failures(tiny_tokenizer_module: Any) -> None:
    tok = tiny_tokenizer_module.build_tiny_tokenizer(with_template=False)
    kept, stats = filter_overlong(Dataset.from_list([{"prompt": chat("a")}]), tok, 100)
    assert len(kept) == 0 and stats.template_failures == 1
    assert "no chat template" in stats.failure_examples[0]


def test_argument_errors(tiny_tokenizer: Any) -> None:
    ds = Dataset.from_list([{"prompt": chat("a")}])
    with pytest.raises(ConfigError, match="no column 'question'"):
        filter_overlong(ds, tiny_tokenizer, 10, prompt_key="question")
    with pytest.raises(ConfigError, match="positive integer"):
        filter_overlong(ds, tiny_tokenizer, 0)
    with pytest.raises(ConfigError, match="tools_key 'tools'"):
        filter_overlong(ds, tiny_tokenizer, 10, tools_key="tools")
