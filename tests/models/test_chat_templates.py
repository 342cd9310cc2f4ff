"""Chat templates chosen at serve or train time (``--chat-template``, ``chat_template``, the registry's
tool template): resolution, errors in plain words, and every backend given the same text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifiers.errors import ConfigError
from verifiers.models.chat_templates import (
    SHIPPED,
    check_tool_call_parser,
    load_chat_template,
    registry_template,
    resolve_chat_template,
    shipped_path,
    vllm_chat_template,
)
from verifiers.models.registry import KNOWN


def test_a_shipped_name_a_file_and_inline_jinja_all_resolve(tmp_path: Path) -> None:
    shipped = load_chat_template("chatml-tools")
    assert "<tool_call>" in shipped and "<tool_response>" in shipped and "<tools>" in shipped
    assert shipped_path("chatml-tools").read_text() == shipped
    f = tmp_path / "t.jinja"
    f.write_text("{{ messages[0].content }}")
    assert load_chat_template(str(f)) == "{{ messages[0].content }}"
    assert load_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}").startswith("{% for")


def test_bad_templates_are_refused_with_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'chatml-tool' is neither a file, a Jinja template nor a shipped "
                                          r"template \(chatml-tools, gemma3\)"):
        load_chat_template("chatml-tool")
    plain = tmp_path / "notes.txt"
    plain.write_text("hello")
    with pytest.raises(ConfigError, match="holds no Jinja"):
        load_chat_template(str(plain))
    with pytest.raises(ConfigError, match="tool call parser 'mistral' is not supported; supported: hermes"):
        check_tool_call_parser("mistral")


def test_the_registry_model_gets_its_tool_template_with_its_default_system_message(tmp_path: Path) -> None:
    entry = KNOWN["smollm2-135m-instruct"]
    assert entry.tool_template in SHIPPED and entry.tools_label() == "shipped: chatml-tools"
    text, name = registry_template("smollm2-135m-instruct")
    assert name == "chatml-tools" and json.dumps(entry.default_system) in text.splitlines()[0]
    # its converted directory is recognised by the GGUF hash the conversion recorded
    converted = tmp_path / "converted"
    converted.mkdir()
    (converted / "gguf_source.json").write_text(json.dumps({"sha256": entry.gguf_sha256}))
    assert registry_template(converted) == (text, name)
    other = tmp_path / "other"
    other.mkdir()
    assert registry_template(other) is None and registry_template("tiny") is None
    # an explicit template wins; a model without one keeps its own
    assert resolve_chat_template(converted, "{{ 'x' }}") == ("{{ 'x' }}", "{{ 'x' }}")
    assert resolve_chat_template(other, None) == (None, None)


def test_vllm_is_given_a_file_holding_the_text_the_other_backends_use(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_MODEL_CACHE", str(tmp_path / "cache"))
    path = vllm_chat_template("smollm2-135m-instruct", None)
    assert path is not None and Path(path).read_text() == resolve_chat_template("smollm2-135m-instruct", None)[0]
    assert vllm_chat_template("smollm2-135m-instruct", "chatml-tools") == str(shipped_path("chatml-tools"))
    assert vllm_chat_template(tmp_path, None) is None
    inline = vllm_chat_template(tmp_path, "{{ 'a\\nb' }}")  # inline text goes through a file too
    assert inline is not None and Path(inline).read_text() == "{{ 'a\\nb' }}"


def test_vllm_command_carries_the_template_and_the_parser(tmp_path: Path) -> None:
    from verifiers.inference.vllm.server import VLLMServerSpec, build_command

    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 2, "dtype": "float32"}))
    argv, _ = build_command(VLLMServerSpec(str(d), device="cpu", chat_template="/t.jinja",
                                           tool_call_parser="hermes"), 1)
    assert argv[argv.index("--chat-template") + 1] == "/t.jinja"
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in argv
    argv, _ = build_command(VLLMServerSpec(str(d), device="cpu"), 1)
    assert "--chat-template" not in argv and "--enable-auto-tool-choice" not in argv


def test_train_config_takes_the_two_keys_and_refuses_an_unknown_parser() -> None:
    from trainers.grpo.config import load_config

    cfg = load_config(None, {"chat_template": "chatml-tools"})
    assert cfg.chat_template == "chatml-tools" and cfg.tool_call_parser == "hermes"
    with pytest.raises(ConfigError, match="tool_call_parser 'llama3_json' is not supported; supported: hermes"):
        load_config(None, {"tool_call_parser": "llama3_json"})


def test_vf_model_list_shows_the_tool_template(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from verifiers.cli.model import main

    monkeypatch.setenv("VF_MODEL_CACHE", str(tmp_path))
    assert main(["list"]) == 0
    head, *rows = capsys.readouterr().out.splitlines()
    row = next(r for r in rows if r.startswith("smollm2-135m-instruct"))
    assert "TOOL TEMPLATE" in head and "shipped: chatml-tools" in row
    gemma = next(r for r in rows if r.startswith("gemma3-270m"))
    assert "Gemma Terms of Use (see https://ai.google.dev/gemma/terms)" in gemma
    assert gemma.split("  ")[-1].strip() == "-" and "none (pass --chat-template)" in gemma


def test_the_gemma3_template_writes_gemma_3s_turns() -> None:
    """The text google/gemma-3-*-it's own template renders for these chats (its format, our template):
    no system role (the system text opens the first user turn), ``model`` for the assistant, trimmed text."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from verifiers.models.shipped import shipped_path

    def refuse(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = refuse
    template = env.from_string(shipped_path("gemma3").read_text())
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2? "},
            {"role": "assistant", "content": " 4"}, {"role": "user", "content": [{"type": "text", "text": "And 3+3?"}]}]
    assert template.render(messages=chat, bos_token="<bos>", add_generation_prompt=True) == (
        "<bos><start_of_turn>user\nBe brief.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n")
    assert template.render(messages=chat[1:2], bos_token="<bos>") == "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
    with pytest.raises(ValueError, match="alternate"):
        template.render(messages=[chat[2]], bos_token="<bos>")
