"""Load a saved causal LM and its tokenizer for serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError
from verifiers.models.tokenizers import load_tokenizer

__all__ = ["check_model_dir", "load_model_and_tokenizer", "load_named_model", "load_tokenizer"]

_DTYPES = {"auto": None, "float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def check_model_dir(path: str | Path, dtype: str = "auto") -> Path:
    """Raise `ConfigError` unless ``path`` holds a saved model; cheap, so CLIs can fail before importing torch."""
    p = Path(path)
    if not (p / "config.json").is_file():
        raise ConfigError(
            f"{path} is not a saved model directory (no config.json). Pass a directory written by "
            "save_pretrained, e.g. one made with `vf-tiny DIR`."
        )
    if dtype not in _DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    return p


def load_model_and_tokenizer(
    path: str | Path, *, dtype: str = "auto", device: str = "cpu", with_tokenizer: bool = True
) -> tuple[Any, Any]:
    p = check_model_dir(path, dtype)
    import torch
    from transformers import AutoModelForCausalLM

    from verifiers.models.offline import load_kwargs

    kwargs: dict[str, Any] = load_kwargs()
    if _DTYPES[dtype] is not None:
        kwargs["dtype"] = getattr(torch, _DTYPES[dtype])
    model = AutoModelForCausalLM.from_pretrained(str(p), **kwargs).to(device)
    model.eval()
    tok = load_tokenizer(p) if with_tokenizer else None
    return model, tok


def load_named_model(spec: str | Path, *, dtype: str = "auto", device: str = "cpu",
                     chat_template: str | None = None) -> tuple[Any, Any]:
    """The model ``spec`` names (a directory, a .gguf file, a registry name or a hub id: `resolve_model`)
    and its tokenizer, whose chat template is ``chat_template`` (a file, a shipped name or Jinja text),
    else a registry model's shipped tool template, else its own (`verifiers.models.chat_templates`)."""
    from verifiers.models.chat_templates import resolve_chat_template, use_chat_template
    from verifiers.models.source import resolve_model

    model_dir = resolve_model(str(spec))
    template, _ = resolve_chat_template(spec, chat_template)
    model, tok = load_model_and_tokenizer(model_dir, dtype=dtype, device=device)
    return model, use_chat_template(tok, template)
