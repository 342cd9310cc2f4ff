"""A GGUF file turned into a ``save_pretrained`` directory that every part of verifiers can load.

llama.cpp's GGUF files carry a whole model in one file: quantized weights, the config and the
tokenizer with its chat template. vf-serve, vf-train, vLLM and the embedded engine all load
``save_pretrained`` directories, so a GGUF is converted once: transformers dequantizes it
(``from_pretrained(dir, gguf_file=...)``), and the model is saved as safetensors in float32
or bfloat16 together with its tokenizer, chat template and generation config. The result is
cached under ``CACHE/converted/<sha256[:16]>-<dtype>/`` (the file's content hash, so a
renamed or re-downloaded copy of the same file reuses it) and written through a temporary
directory renamed into place, so an interrupted conversion leaves nothing half-written.

Nothing here imports torch until a conversion actually runs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError
from verifiers.install_hint import install_command
from verifiers.models.cache import cache_root, locked, sha256_file, size_text, temp_sibling
from verifiers.models.manifest import SOURCE_FILE as SOURCE_FILE  # re-exported: chat_templates reads it
from verifiers.models.manifest import changed_files, intact, record_files

DTYPES = ("float32", "bfloat16")
# What the conversion imports: transformers reads GGUF through the `gguf` package and refuses
# GGUF loading without accelerate.
_NEEDS = ("gguf", "torch", "transformers", "accelerate", "safetensors")
# A conversation that exercises the chat template: the saved tokenizer must render it identically.
_PROBE_CHAT = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"},
               {"role": "user", "content": "And 7 * 6?"}]


@dataclass(frozen=True)
class ConversionExtras:
    """What a known GGUF file lacks and its conversion adds (`verifiers.models.registry` knows which files):
    a shipped chat template when the file carries none, and the token that ends a turn under it."""

    chat_template: str | None = None  # a name in `verifiers.models.shipped.SHIPPED`
    end_of_turn: str | None = None


ExtrasFor = Callable[[str], "ConversionExtras | None"]
"""The extras for the GGUF with this sha256, if it is a known one (`verifiers.models.registry.conversion_extras`)."""


def gguf_files(directory: Path) -> list[Path]:
    """The ``.gguf`` files directly inside ``directory``, sorted."""
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() == ".gguf")


def find_gguf(path: str | Path) -> Path | None:
    """``path`` if it is a ``.gguf`` file, the one ``.gguf`` in ``path`` if it is a directory, else None.

    A directory holding several GGUF files is ambiguous (usually one model in several
    quantizations), so it gives None here; `resolve_model` names the files in its error.
    """
    p = Path(path).expanduser()
    if p.is_file():
        return p if p.suffix.lower() == ".gguf" else None
    if p.is_dir():
        found = gguf_files(p)
        return found[0] if len(found) == 1 else None
    return None


def is_converted(directory: Path) -> bool:
    """Whether ``directory`` holds a finished conversion (directories only appear when complete)."""
    return (directory / "config.json").is_file() and any(directory.glob("*.safetensors"))


def converted_path(root: Path, sha256: str, dtype: str) -> Path:
    """Where the conversion of the GGUF with content hash ``sha256`` into ``dtype`` lives under the cache ``root``."""
    return root / "converted" / f"{sha256[:16]}-{dtype}"


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)} for a converted GGUF, got {dtype!r}")
    return dtype


def check_conversion_deps() -> None:
    """Raise `ConfigError` naming the install command when a module the conversion needs is missing."""
    missing = [m for m in _NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        verb = "comes" if len(missing) == 1 else "come"
        raise ConfigError(f"converting a GGUF file needs {', '.join(missing)}, which {verb} with the gguf extra: "
                          f"{install_command('gguf')}")


def gguf_architecture(path: str | Path) -> str:
    """The ``general.architecture`` field of a GGUF file's header (``llama``, ``gemma3``, ...); a file
    whose header does not read as GGUF is a one-line `ConfigError` (`gguf_check.read_architecture`)."""
    _need_gguf()
    from verifiers.models.gguf_check import read_architecture

    return read_architecture(path)


def _need_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError(f"reading a GGUF file needs the gguf package: {install_command('gguf')}")


def supported_architectures() -> list[str]:
    """The GGUF architectures the installed transformers can dequantize."""
    names: set[str] = set()
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        pass
    else:
        names.update(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))
    try:  # transformers 5.x's second GGUF path (packed weights) handles a few more
        from transformers.integrations.gguf.gguf_conversion_mapping import GGUF_ARCHS
    except ImportError:
        pass
    else:
        names.update(GGUF_ARCHS)
    return sorted(names)


def convert_gguf(path: str | Path, *, dtype: str = "float32", cache_dir: Path | None = None,
                 log: Callable[[str], None] = print, extras_for: ExtrasFor | None = None) -> Path:
    """The converted ``save_pretrained`` directory of the GGUF at ``path`` (a file, or a directory holding one).

    Reused when present (keyed by the file's sha256 and ``dtype``); otherwise converted once
    under a lock, so concurrent callers (accelerate ranks, test workers) wait for the first.
    ``cache_dir`` is the cache root (default ``$VF_MODEL_CACHE`` or ``~/.cache/verifiers/models``).
    ``extras_for`` recognises a known file by its hash (`ConversionExtras`).
    """
    src = find_gguf(path)
    if src is None:
        raise ConfigError(f"{path} is not a .gguf file nor a directory holding exactly one")
    check_dtype(dtype)
    root = cache_dir if cache_dir is not None else cache_root()
    digest = sha256_file(src)
    target = converted_path(root, digest, dtype)
    if is_converted(target) and not (problems := intact(target, log)):
        return target
    with locked(root, f"convert-{digest[:16]}-{dtype}"):
        if is_converted(target):  # another process may have finished or repaired it while we waited
            problems = changed_files(target)
            if not problems:
                return target
            log(f"the cached conversion of {src.name} changed since it was written ({'; '.join(problems)}): "
                "converting it again")
            shutil.rmtree(target)
        extras = extras_for(digest) if extras_for is not None else None
        convert_into(src, target, dtype=dtype, sha256=digest, log=log, extras=extras)
    return target


def convert_into(src: Path, target: Path, *, dtype: str = "float32", sha256: str | None = None,
                 log: Callable[[str], None] = print, extras: ConversionExtras | None = None) -> Path:
    """Convert the GGUF file ``src`` into the directory ``target`` (which must not hold anything else).

    The caller holds the lock; ``target`` is written as a temporary sibling and renamed into place.
    """
    check_dtype(dtype)
    check_conversion_deps()
    if target.exists():
        if is_converted(target):
            return target
        if not target.is_dir() or any(target.iterdir()):
            raise ConfigError(f"{target} already exists and is not a converted model: choose an empty or new directory")
    _need_gguf()
    from verifiers.models.gguf_check import check_gguf

    tmp = temp_sibling(target)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)

    def buildable(arch: str) -> None:
        if arch not in supported_architectures():
            raise _conversion_error(src, arch, None)

    # before anything is allocated: a malformed, unsupported or inconsistent file is one line
    arch = check_gguf(src, dtype=dtype, on_architecture=buildable).architecture
    log(f"converting {src.name} ({size_text(src.stat().st_size)}) to {dtype} safetensors in {target} …")
    t0 = time.monotonic()
    digest = sha256 or sha256_file(src)
    try:
        notes = _dequantize_and_save(src, tmp, dtype=dtype, arch=arch, extras=extras)
        record_files(tmp, {"gguf_file": src.name, "sha256": digest, "architecture": arch, "dtype": dtype, **notes})
        if target.exists():  # an empty directory the caller named
            target.rmdir()
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"converted {src.name} in {time.monotonic() - t0:.1f} s")
    return target


def replace_dir(new: Path, target: Path) -> None:
    """Put the finished directory ``new`` where ``target`` is, replacing it: ``target`` is moved aside
    first, so at every moment the path holds either the old directory or the whole new one."""
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    target.rename(old)
    try:
        new.rename(target)
    except OSError:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _dequantize_and_save(src: Path, out: Path, *, dtype: str, arch: str,
                         extras: ConversionExtras | None) -> dict[str, Any]:
    """Dequantize ``src`` into ``out`` with its tokenizer; what was added beyond the GGUF (for the record)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from verifiers.models.offline import load_kwargs

    kwargs: dict[str, Any] = {**load_kwargs(), "gguf_file": src.name, "dtype": getattr(torch, dtype)}
    try:  # transformers >= 5.x keeps some GGUF weights packed unless told to dequantize them all
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # our own progress line instead of transformers' bars
    try:
        try:
            model = AutoModelForCausalLM.from_pretrained(str(src.parent), **kwargs)
            tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        except Exception as exc:
            raise _conversion_error(src, arch, exc) from exc
        _drop_quantization_marker(model)
        notes = _complete_tokenizer(tok, model, src, extras)
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    _check_tokenizer_survived(tok, out, src)
    return notes


def _complete_tokenizer(tok: Any, model: Any, src: Path, extras: ConversionExtras | None) -> dict[str, Any]:
    """Put back what transformers' GGUF tokenizer loses, and what a known GGUF lacks.

    1. ``tokenizer.ggml.add_bos_token``: transformers builds Gemma's tokenizer without the BOS
       post-processor the file asks for, and Gemma without ``<bos>`` degenerates (measured on
       Gemma 3 270M: 6.1 nats/token on plain English without it, 1.9 with it).
    2. ``extras``' chat template (a registry entry's) when the file carries none (the Gemma 3 270M GGUF
       has no ``tokenizer.chat_template``), and its ``end_of_turn`` token among the generation
       config's eos ids, so replies under that template stop where the turn ends.
    """
    from verifiers.models.gguf_check import tokenizer_flags

    notes: dict[str, Any] = {}
    if tokenizer_flags(src).get("add_bos_token") and tok.bos_token_id is not None and not getattr(tok, "add_bos_token", True):
        tok.add_bos_token = True
        notes["add_bos_token"] = "set, as the GGUF's tokenizer.ggml.add_bos_token says"
    if extras is None:
        return notes
    if extras.chat_template and not tok.chat_template:
        from verifiers.models.shipped import shipped_path

        tok.chat_template = shipped_path(extras.chat_template).read_text()
        notes["chat_template"] = f"{extras.chat_template} (shipped: the GGUF carries none)"
    if extras.end_of_turn:
        turn_end = tok.convert_tokens_to_ids(extras.end_of_turn)
        eos = model.generation_config.eos_token_id
        ids = [eos] if isinstance(eos, int) else list(eos or [])
        if isinstance(turn_end, int) and turn_end not in ids:
            model.generation_config.eos_token_id = [*ids, turn_end]
            notes["eos_token_id"] = f"{extras.end_of_turn} ({turn_end}) added: it ends a turn under the chat template"
    return notes


def _conversion_error(src: Path, arch: str, exc: Exception | None) -> ConfigError:
    supported = supported_architectures()
    if arch not in supported:
        return ConfigError(
            f"{src.name} is a {arch!r} model, an architecture the installed transformers cannot dequantize "
            f"from GGUF (it can: {', '.join(supported)}). Use a GGUF of a supported architecture, or the "
            f"model's original safetensors release"
        )
    return ConfigError(f"transformers could not convert {src.name} (architecture {arch!r}): "
                       f"{type(exc).__name__}: {exc}")


def _drop_quantization_marker(model: Any) -> None:
    """After a full dequantization the weights are plain tensors, but transformers still marks the
    model as GGUF-quantized and `save_pretrained` refuses it; the marker is all that is removed."""
    for attr in ("hf_quantizer", "quantization_method"):
        if getattr(model, attr, None) is not None:
            setattr(model, attr, None)
    if getattr(model, "is_quantized", False):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _check_tokenizer_survived(original: Any, out: Path, src: Path) -> None:
    """The saved tokenizer must render chats, and name eos/bos, exactly as the GGUF's own did."""
    from verifiers.models.tokenizers import load_tokenizer

    saved = load_tokenizer(out)
    problems = [f"{name} {getattr(original, name)!r} became {getattr(saved, name)!r}"
                for name in ("eos_token", "bos_token") if getattr(original, name) != getattr(saved, name)]
    probe = "Hello, world! 123 — déjà vu"
    if original.encode(probe) != saved.encode(probe):
        problems.append("the saved tokenizer splits text differently")
    elif getattr(original, "add_bos_token", False) and saved.encode(probe)[:1] != [saved.bos_token_id]:
        problems.append("the saved tokenizer does not start a text with its bos token")
    if original.chat_template:
        before = original.apply_chat_template(_PROBE_CHAT, tokenize=False, add_generation_prompt=True)
        after = saved.apply_chat_template(_PROBE_CHAT, tokenize=False, add_generation_prompt=True)
        if before != after:
            problems.append("the chat template renders differently")
    if problems:
        raise ConfigError(f"converting {src.name}: the tokenizer did not survive saving ({'; '.join(problems)}); "
                          "please report this with the GGUF file's name")
