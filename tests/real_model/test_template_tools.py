"""Tools on SmolLM2-135M-Instruct, whose own chat template drops them (docs/agents.md).

Its template renders a chat as if no tools were offered, so the model never sees a schema. The
registry names the shipped ``chatml-tools`` template (Hermes convention) as its tool template:
every backend that loads the model by name or from its converted directory renders tools with it,
and chats without tools exactly as the model's own template does.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

pytestmark = pytest.mark.slow

SCHEMA = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


@pytest.fixture(scope="module")
def tool_tokenizer(real_model_dir: Any) -> Any:
    from verifiers.inference.engine.loading import load_tokenizer
    from verifiers.models.chat_templates import resolve_chat_template, use_chat_template

    template, origin = resolve_chat_template(real_model_dir, None)
    assert origin is not None and origin.startswith("chatml-tools")
    return use_chat_template(load_tokenizer(real_model_dir), template)


def test_smollm2s_own_template_drops_tools(real_model_dir: Any) -> None:
    from verifiers.inference.engine.loading import load_tokenizer
    from verifiers.inference.server.api import template_drops_tools

    assert template_drops_tools(load_tokenizer(real_model_dir))


def test_tool_template_renders_schemas_calls_and_results(tool_tokenizer: Any) -> None:
    from verifiers.data.templating import apply_chat_template
    from verifiers.inference.server.api import template_drops_tools

    assert not template_drops_tools(tool_tokenizer)
    call = {"id": "c0", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "6 * 7"}'}}
    chat = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "What is 6 * 7?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c0", "content": "42"},
            {"role": "assistant", "content": "\\boxed{42}"}]
    text = apply_chat_template(tool_tokenizer, chat, tools=[SCHEMA], tokenize=False, add_generation_prompt=False)
    system = text[: text.index("<|im_end|>")]
    assert system.startswith("<|im_start|>system\nUse the tool.\n\n# Tools\n")
    assert f"<tools>\n{json.dumps(SCHEMA)}\n</tools>" in system  # one schema per line, as JSON
    assert ("<|im_start|>assistant\n<tool_call>\n"
            '{"name": "calculate", "arguments": {"expression": "6 * 7"}}\n</tool_call><|im_end|>\n') in text
    assert "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n\\boxed{42}<|im_end|>\n")


@pytest.mark.parametrize("chat", [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello!"},
     {"role": "assistant", "content": "Bonjour !"}, {"role": "user", "content": "Encore ?"}],
], ids=["default_system", "own_system"])
def test_chats_without_tools_render_as_the_models_own_template(real_tokenizer: Any, tool_tokenizer: Any,
                                                                chat: list[dict[str, str]]) -> None:
    for generation_prompt in (True, False):
        own = real_tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation_prompt)
        assert tool_tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=generation_prompt) == own


def test_vf_serve_shows_the_registry_model_its_tools(vf_serve: Any, tool_tokenizer: Any) -> None:
    from verifiers.data.templating import apply_chat_template

    chat = [{"role": "user", "content": "What is 123 * 456?"}]
    client = openai.OpenAI(base_url=vf_serve.base_url, api_key="EMPTY", max_retries=0, timeout=120)
    try:
        r = client.chat.completions.create(model=vf_serve.model, messages=chat, tools=[SCHEMA], max_tokens=2,
                                           temperature=0, extra_body={"return_token_ids": True})
    finally:
        client.close()
    assert list(r.prompt_token_ids) == apply_chat_template(tool_tokenizer, chat, tools=[SCHEMA])
    assert "calculate" in tool_tokenizer.decode(r.prompt_token_ids)
    log = vf_serve.log.read_text()
    assert "chat template: chatml-tools" in log and "does not render `tools`" not in log
