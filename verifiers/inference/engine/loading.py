"""Load a saved causal LM and its tokenizer for serving."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError

_DTYPES = {"auto": None, "float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def load_tokenizer(path: str | Path) -> Any:
    """``AutoTokenizer``, except for tokenizers saved from a ``tokenizers`` object (such as `vf-tiny`'s).

    transformers 5 maps some model types (qwen2) to a tokenizer class that rebuilds the
    pre-tokenizer from the vocabulary, which would silently change how a character-level
    tokenizer splits text; such files are loaded exactly as saved instead.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg_file = Path(path) / "tokenizer_config.json"
    if cfg_file.is_file():
        cfg = json.loads(cfg_file.read_text())
        if cfg.get("tokenizer_class") in ("TokenizersBackend", "PreTrainedTokenizerFast") and cfg.get("vf_exact"):
            return PreTrainedTokenizerFast.from_pretrained(str(path))
    return AutoTokenizer.from_pretrained(str(path))


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

    kwargs: dict[str, Any] = {}
    if _DTYPES[dtype] is not None:
        kwargs["dtype"] = getattr(torch, _DTYPES[dtype])
    model = AutoModelForCausalLM.from_pretrained(str(p), **kwargs).to(device)
    model.eval()
    tok = load_tokenizer(p) if with_tokenizer else None
    return model, tok
