"""vf-tiny: a random Llama/Qwen2 model plus a character tokenizer that plain transformers can load.

The tokenizer must round-trip any text exactly (spaces, newlines, tabs, tool markup) and
its chat template must render every role, tools included, in the layout the server's
tool parser reads back.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from verifiers.data.templating import ChatTemplateError, apply_chat_template
from verifiers.inference.engine.loading import load_tokenizer
from verifiers.inference.server.tool_parser import parse_tool_calls
from verifiers.models.tiny import IM_END, TOOL_TOKENS, build_char_tokenizer

ARCHS = ("llama", "qwen2")
SAMPLE = "Hi  there,\n\ttabs and  spaces!\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> <think>ok</think>~"


def vf_tiny_command() -> list[str]:
    """The installed console script when there is one, else the same entry point as a module."""
    script = Path(sys.executable).with_name("vf-tiny")
    found = str(script) if script.exists() else shutil.which("vf-tiny")
    return [found] if found else [sys.executable, "-m", "verifiers.cli.tiny"]


@pytest.fixture(scope="module")
def cli_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both architectures written by real vf-tiny processes (run side by side)."""
    root = tmp_path_factory.mktemp("vf-tiny")
    procs = {
        arch: subprocess.Popen([*vf_tiny_command(), str(root / arch), "--arch", arch],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for arch in ARCHS
    }
    for arch, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"vf-tiny --arch {arch} failed: {err}"
        assert str(root / arch) in out
    return {arch: root / arch for arch in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_vf_tiny_output_loads_with_auto_model(cli_dirs, arch: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(cli_dirs[arch]))
    tok = load_tokenizer(cli_dirs[arch])
    assert model.config.model_type == arch
    assert model.config.vocab_size == len(tok)
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    eos = tok.convert_tokens_to_ids(IM_END)
    assert eos in model.generation_config.eos_token_id
    ids = torch.tensor([tok.encode("hello", add_special_tokens=False)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, 5, len(tok))


def test_llama_tokenizer_round_trips_with_auto_tokenizer(cli_dirs) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(cli_dirs["llama"]))
    ids = tok.encode(SAMPLE, add_special_tokens=False)
    assert tok.decode(ids) == SAMPLE
    assert tok.chat_template is not None


@pytest.mark.parametrize("arch", ARCHS)
def test_load_tokenizer_round_trips_text_exactly(cli_dirs, arch: str) -> None:
    tok = load_tokenizer(cli_dirs[arch])
    ids = tok.encode(SAMPLE, add_special_tokens=False)
    assert tok.decode(ids) == SAMPLE
    assert tok.decode(ids, skip_special_tokens=True) == SAMPLE  # tool markup is not "special"
    for t in TOOL_TOKENS:  # one token each, so the server can force and detect them
        assert tok.encode(t, add_special_tokens=False) == [tok.convert_tokens_to_ids(t)]
    assert len(tok.encode("a  b", add_special_tokens=False)) == 4  # one token per character


def test_same_seed_same_weights_different_seed_different() -> None:
    import torch

    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    a, _ = build_tiny_model(TinyModelSpec(seed=0))
    b, _ = build_tiny_model(TinyModelSpec(seed=0))
    c, _ = build_tiny_model(TinyModelSpec(seed=1))
    pa, pb = a.state_dict(), b.state_dict()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(pa["model.embed_tokens.weight"], c.state_dict()["model.embed_tokens.weight"])


# -- the chat template --------------------------------------------------------------------
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]


@pytest.fixture(params=ARCHS)
def tok(request: pytest.FixtureRequest, cli_dirs: dict[str, Path]) -> Any:
    return load_tokenizer(cli_dirs[request.param])


def render(tok: Any) -> Callable[..., str]:
    def go(messages: list[dict[str, Any]], **kw: Any) -> str:
        return str(apply_chat_template(tok, messages, tokenize=False, **kw))

    return go


def test_template_renders_every_role(tok) -> None:
    messages = [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "What is 1+2?"},
        {"role": "assistant", "content": "Let me add.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
            {"id": "c2", "type": "function", "function": {"name": "add", "arguments": '{"a": 3}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "assistant", "content": [{"type": "text", "text": "It is 3."}]},
    ]
    text = render(tok)(messages, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe exact.<|im_end|>\n")
    assert "<|im_start|>user\nWhat is 1+2?<|im_end|>\n" in text
    assert '<|im_start|>assistant\nLet me add.<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' in text
    assert "<tool_response>\n3\n</tool_response>" in text
    assert "<|im_start|>assistant\nIt is 3.<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert text.count("<|im_start|>system") == 1


def test_rendered_tool_calls_parse_back_to_the_same_calls(tok) -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
             {"id": "c2", "type": "function", "function": {"name": "add", "arguments": '{"a": 3}'}}]
    text = render(tok)([{"role": "assistant", "content": "Sure.", "tool_calls": calls}], add_generation_prompt=False)
    body = text.removeprefix("<|im_start|>assistant\n").removesuffix("<|im_end|>\n")
    content, parsed = parse_tool_calls(body)
    assert content == "Sure."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed] == [
        ("add", {"a": 1, "b": 2}), ("add", {"a": 3})]


def test_template_lists_tools_in_the_system_turn(tok) -> None:
    text = render(tok)([{"role": "system", "content": "Sys."}, {"role": "user", "content": "hi"}], tools=TOOLS)
    system = text.split("<|im_end|>")[0]
    assert "Sys." in system and "# Tools" in system
    assert json.loads(system.split("<tools>\n")[1].split("\n")[0]) == TOOLS[0]
    assert "<tool_call>" in system  # the format the model should use is described
    assert "# Tools" not in render(tok)([{"role": "user", "content": "hi"}])


def test_signature_tool_format_lists_each_tool_as_one_short_line(tmp_path: Path) -> None:
    """vf-tiny --tool-format signature: name(arg: type, ...): description, and calls render as in the JSON form."""
    proc = subprocess.run([*vf_tiny_command(), str(tmp_path / "m"), "--tool-format", "signature", "--layers", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sig, json_tok = load_tokenizer(tmp_path / "m"), build_char_tokenizer()
    two = [*TOOLS, {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    convo = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "hi"}]
    system = render(sig)(convo, tools=two).split("<|im_end|>")[0]
    assert "Sys." in system and "<tool_call>" in system
    assert "\nadd(a: integer): Add two numbers.\nnow()\n" in system
    assert "{" not in system.split("<tools>")[1].split("</tools>")[0]  # no JSON schema
    assert len(render(sig)(convo, tools=TOOLS)) < len(render(json_tok)(convo, tools=TOOLS)) - 60
    call = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]}]
    assert render(sig)(call, add_generation_prompt=False) == render(json_tok)(call, add_generation_prompt=False)


@pytest.mark.parametrize(
    "messages",
    [[{"role": "wizard", "content": "x"}], [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]],
    ids=["unknown-role", "late-system"],
)
def test_template_rejects_bad_conversations(tok, messages) -> None:
    with pytest.raises(ChatTemplateError) as err:
        render(tok)(messages)
    assert "role" in str(err.value) or "system" in str(err.value)
