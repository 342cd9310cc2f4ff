"""Tiny random-initialised chat models with a character-level tokenizer.

Nothing can be downloaded in tests, demos or CI, yet the whole stack (server, token ids,
chat templates, tool calls, training) must run on a real ``transformers`` model. This
module builds one from scratch: a small Qwen2- or Llama-style causal LM with random
weights and a character-level tokenizer whose chat template renders system, user,
assistant and tool messages and the Hermes-style ``<tool_call>{json}</tool_call>``
format. Both are written with ``save_pretrained`` so any transformers user can load
them with ``AutoModelForCausalLM`` / ``AutoTokenizer``.

Run ``vf-tiny OUT_DIR`` or ``python -m verifiers.models.tiny OUT_DIR``.
"""

from __future__ import annotations

import argparse
import json
import string
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PAD = "<|pad|>"
EOS = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
UNK = "<|unk|>"
# Tool markup tokens are ordinary (non-special) added tokens, as in Qwen2.5: they survive
# ``skip_special_tokens=True`` decoding so the server's tool parser can see them. A policy can
# sample them anywhere, as a real one can; rewards read replies through ``vf.reply_text``,
# which drops them, rather than the samplers masking them (docs/environments.md).
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
SPECIAL_TOKENS = (PAD, EOS, IM_START, IM_END, UNK)

# The template follows the ChatML layout used by Qwen models. Tools are listed in the system
# turn, either as one JSON schema per line (``"json"``, as Qwen does) or as one compact
# signature per line (``"signature"``: ``lookup(key: string): read the value of a key``).
# With one token per character a JSON schema costs ~250 prompt tokens a tool, most of every
# sequence of a short tool task; the signature carries the names, types and description in ~50.
# Assistant tool calls are rendered exactly as the model is expected to emit them
# (``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` in both forms), so a multi-turn
# transcript re-renders to the same text.
_TOOLS_JSON = (
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
)
_TOOLS_SIGNATURE = (
    "{% for t in tools %}"
    "{% set f = t.function if t.function is defined else t %}"
    "{% set props = (f.parameters or {}).properties or {} %}"
    "{{ f.name }}({% for k in props %}{{ k }}: {{ props[k].type or 'any' }}{% if not loop.last %}, {% endif %}"
    "{% endfor %}){% if f.description %}: {{ f.description }}{% endif %}{{ '\\n' }}"
    "{% endfor %}"
)
ToolFormat = Literal["json", "signature"]


def chat_template(tool_format: ToolFormat = "json") -> str:
    """The tiny tokenizer's chat template, listing tools as JSON schemas or as signatures."""
    tools = {"json": _TOOLS_JSON, "signature": _TOOLS_SIGNATURE}[tool_format]
    return (
        "{% macro text(c) %}"
        "{% if c is string %}{{ c }}"
        "{% elif c is none %}"
        "{% else %}{% for p in c %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}"
        "{% endif %}"
        "{% endmacro %}"
        "{% if tools %}"
        "<|im_start|>system\n"
        "{% if messages and messages[0].role == 'system' %}{{ '\\n' }}{{ text(messages[0].content) }}{{ '\\n' }}{% endif %}"
        "\n# Tools\n<tools>\n"
        + tools
        + "</tools>\nCall a tool with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\n"
        "{% elif messages and messages[0].role == 'system' %}"
        "<|im_start|>system\n{{ text(messages[0].content) }}<|im_end|>\n"
        "{% endif %}"
        "{% for m in messages %}"
        "{% if m.role == 'system' %}"
        "{% if not loop.first %}{{ raise_exception('a system message must come first') }}{% endif %}"
        "{% elif m.role == 'assistant' %}"
        "<|im_start|>assistant\n{{ text(m.content) }}"
        "{% for tc in (m.tool_calls or []) %}"
        "{% set f = tc.function if tc.function is defined else tc %}"
        "<tool_call>{\"name\": {{ f.name | tojson }}, \"arguments\": "
        "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}"
        "}</tool_call>"
        "{% endfor %}"
        "<|im_end|>\n"
        "{% elif m.role == 'tool' %}"
        "<|im_start|>user\n<tool_response>\n{{ text(m.content) }}\n</tool_response><|im_end|>\n"
        "{% elif m.role == 'user' %}"
        "<|im_start|>user\n{{ text(m.content) }}<|im_end|>\n"
        "{% else %}"
        "{{ raise_exception('unknown role: ' ~ m.role) }}"
        "{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


CHAT_TEMPLATE = chat_template("json")


class TinyModelSpec(BaseModel):
    """Shape of a tiny model. The defaults make a ~0.2M-parameter model that trains on a CPU in seconds."""

    model_config = ConfigDict(extra="forbid")

    arch: Literal["llama", "qwen2"] = "llama"
    hidden_size: int = Field(64, ge=8)
    intermediate_size: int = Field(192, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    max_position_embeddings: int = Field(2048, ge=16)
    tie_word_embeddings: bool = True
    tool_format: ToolFormat = "json"
    seed: int = 0


def char_vocab() -> list[str]:
    """Special tokens, tool markup tokens, then printable ASCII (incl. space, newline, tab)."""
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    return [*SPECIAL_TOKENS, *TOOL_TOKENS, *chars]


def build_char_tokenizer(tool_format: ToolFormat = "json") -> Any:
    """A ``PreTrainedTokenizerFast`` that maps every character to one token.

    Unknown characters become ``<|unk|>``. Decoding concatenates tokens without spaces.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(char_vocab())}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=IM_END,
        unk_token=UNK,
        bos_token=None,
        padding_side="left",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = chat_template(tool_format)
    return tok


def build_tiny_model(spec: TinyModelSpec | None = None, tokenizer: Any | None = None) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)`` with random weights drawn from ``spec.seed``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    tok = tokenizer if tokenizer is not None else build_char_tokenizer(spec.tool_format)
    common: dict[str, Any] = dict(
        vocab_size=len(tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(spec.seed)
    if spec.arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    eos_ids = [tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(EOS)]
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids, pad_token_id=tok.pad_token_id, do_sample=True, temperature=1.0
    )
    model.eval()
    return model, tok


def save_tiny_model(out_dir: str | Path, spec: TinyModelSpec | None = None) -> Path:
    """Build a tiny model and tokenizer and write both to ``out_dir`` with ``save_pretrained``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = build_tiny_model(spec)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    # Marks the tokenizer files as exact (see `verifiers.inference.engine.loading.load_tokenizer`).
    cfg_file = out / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["vf_exact"] = True
    cfg_file.write_text(json.dumps(cfg, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vf-tiny", description="Write a tiny random chat model + char tokenizer.")
    ap.add_argument("out_dir", help="directory to write (created if missing)")
    ap.add_argument("--arch", choices=["llama", "qwen2"], default="llama")
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--intermediate-size", type=int, default=192)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--tool-format", choices=["json", "signature"], default="json",
                    help="how the chat template lists tools: JSON schemas, or compact signatures (~6x fewer tokens)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a "Writing model shards" bar for one small file is noise
    spec = TinyModelSpec(
        arch=a.arch,
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.max_len,
        tool_format=a.tool_format,
        seed=a.seed,
    )
    out = save_tiny_model(a.out_dir, spec)
    print(f"wrote tiny {a.arch} model and char tokenizer to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
