"""apply_chat_template: the single templating path, with a real (tiny) tokenizer."""

from __future__ import annotations

from typing import Any

import pytest

from verifiers.data import ChatTemplateError, apply_chat_template, encode_prompt
from verifiers.errors import VFError

CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
RENDERED = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"


def test_renders_text_with_and_without_generation_prompt(tiny_tokenizer: Any) -> None:
    assert apply_chat_template(tiny_tokenizer, CHAT, tokenize=False) == RENDERED + "<|im_start|>assistant\n"
    assert apply_chat_template(tiny_tokenizer, CHAT, tokenize=False, add_generation_prompt=False) == RENDERED


def test_token_ids_are_the_encoded_text_without_extra_special_tokens(tiny_tokenizer: Any) -> None:
    ids = apply_chat_template(tiny_tokenizer, CHAT)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    text = RENDERED + "<|im_start|>assistant\n"
    assert ids == tiny_tokenizer.encode(text, add_special_tokens=False)
    assert tiny_tokenizer.decode(ids) == text
    start = tiny_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(start) == 3  # special tokens are single ids, not spelled out


def test_tools_are_rendered_and_accepted_as_json(tiny_tokenizer: Any) -> None:
    tools = [{"type": "function", "function": {"name": "add"}}]
    with_list = apply_chat_template(tiny_tokenizer, CHAT, tools=tools, tokenize=False)
    with_json = apply_chat_template(
        tiny_tokenizer, CHAT, tools='[{"type": "function", "function": {"name": "add"}}]', tokenize=False
    )
    assert '"name": "add"' in with_list and with_list == with_json
    assert len(apply_chat_template(tiny_tokenizer, CHAT, tools=tools)) > len(
        apply_chat_template(tiny_tokenizer, CHAT)
    )


def test_arrow_none_fill_ins_are_dropped(tiny_tokenizer: Any) -> None:
    # how messages come back from parquet: every key of every message, None where absent
    arrow_like = [
        {"role": m["role"], "content": m["content"], "tool_calls": None, "name": None} for m in CHAT
    ]
    assert apply_chat_template(tiny_tokenizer, arrow_like) == apply_chat_template(tiny_tokenizer, CHAT)


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        ([{"role": "robot", "content": "x"}], "unknown role robot"),
        ([{"role": "user"}], "message without content"),
        ([{"role": "user", "content": None}], "message without content"),
        ([{"content": "no role"}], "no 'role'"),
        ("plain text", "plain-text prompts"),
        ([["user", "hi"]], "not a dict"),
    ],
)
def test_failures_name_the_problem(tiny_tokenizer: Any, messages: Any, needle: str) -> None:
    with pytest.raises(ChatTemplateError, match=needle) as info:
        apply_chat_template(tiny_tokenizer, messages)
    assert isinstance(info.value, VFError)


def test_failure_message_lists_the_roles(tiny_tokenizer: Any) -> None:
    with pytest.raises(ChatTemplateError, match=r"system\(content, role\), robot\(content, role\)"):
        apply_chat_template(tiny_tokenizer, [CHAT[0], {"role": "robot", "content": "x"}])


def test_tokenizer_without_template(tiny_tokenizer_module: Any) -> None:
    tok = tiny_tokenizer_module.build_tiny_tokenizer(with_template=False)
    with pytest.raises(ChatTemplateError, match="has no chat template"):
        apply_chat_template(tok, CHAT)


def test_encode_prompt_chat_and_plain_text(tiny_tokenizer: Any) -> None:
    assert encode_prompt(tiny_tokenizer, CHAT) == apply_chat_template(tiny_tokenizer, CHAT)
    assert encode_prompt(tiny_tokenizer, "abc") == tiny_tokenizer.encode("abc", add_special_tokens=False)
    assert len(encode_prompt(tiny_tokenizer, "abc")) == 3
