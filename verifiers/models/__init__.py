"""Where models come from: GGUF conversion (`gguf`), the named-model registry (`registry`), a name
resolved to a model directory (`source.resolve_model`) and the random `tiny` builder (`tiny`).

Importing this package imports neither torch nor transformers; a conversion imports them when it runs.
"""

from verifiers.models.cache import cache_root
from verifiers.models.gguf import convert_gguf, find_gguf
from verifiers.models.registry import KNOWN, ModelEntry, get_model, list_models

__all__ = ["KNOWN", "ModelEntry", "cache_root", "convert_gguf", "find_gguf", "get_model", "list_models"]
