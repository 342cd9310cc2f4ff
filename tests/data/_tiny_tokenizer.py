"""A real, tiny, character-level chat tokenizer built offline (test-only).

One token per printable character plus ChatML special tokens, so prompt lengths in
tests are easy to reason about: ``<|im_start|>user\\nhi<|im_end|>\\n`` is 1 + 5 + 2 + 1 + 1
tokens. The chat template is ChatML and rejects unknown roles and messages without
content through ``raise_exception`` (as many real templates do).
"""

from __future__ import annotations

import string

SPECIAL_TOKENS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\nTools: ' + (tools | tojson) + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{ raise_exception('unknown role ' + message['role']) }}"
    "{%- endif -%}"
    "{%- if message['content'] is not defined or message['content'] is none -%}"
    "{{ raise_exception('message without content') }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)


def build_tiny_tokenizer(with_template: bool = True):  # -> PreTrainedTokenizerFast
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    if with_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok
