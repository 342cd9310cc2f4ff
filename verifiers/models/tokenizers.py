"""Load a saved tokenizer exactly as it was saved.

It sits with the models (the GGUF conversion checks its tokenizer with it) rather than with the
inference engine, which imports it from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
