"""A GGUF file checked as untrusted input before anything is built from it.

A GGUF is one file from anywhere: a download, a colleague, a PyPI wheel. transformers turns its
metadata into a model config and instantiates that model before reading a single tensor, so a
file whose metadata describes a 10,000-layer model but holds two layers makes it allocate
gigabytes first; a header cut short ends in a numpy or struct traceback. `check_gguf` reads the
file the cheap way and refuses, in one line naming the file, anything that does not add up:

1. the fixed header (magic, version, counts), the counts against what the file's size can hold;
2. the whole header through gguf's reader (any failure: one line, not its traceback);
3. every tensor's data inside the file, names unique, shapes positive;
4. the metadata against the tensors: as many ``blk.N`` blocks as ``<arch>.block_count`` says,
   the embedding width and the vocabulary size the embedding tensor really has;
5. the memory a conversion needs (the parameters in the target dtype, about twice over while
   transformers builds and saves the model) against what the machine has available
   (``VF_GGUF_MAX_MEMORY_GB`` or ``max_memory_gb`` raises or lowers the limit).

Nothing here imports torch; the reader only memory-maps the file.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError
from verifiers.models.host import available_bytes

MEMORY_ENV = "VF_GGUF_MAX_MEMORY_GB"
_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
_HEADER = 24  # magic, version, tensor count, key-value count
_MIN_KV = 8 + 1 + 4 + 1  # key length, a one-byte key, the value type, a one-byte value
_MIN_TENSOR = 8 + 1 + 4 + 8 + 4 + 8  # name length, a one-byte name, n_dims, one dim, type, offset
_BYTES = {"float32": 4, "bfloat16": 2}
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class GGUFSummary:
    """What the checks found: enough to say what the conversion will build."""

    architecture: str
    tensors: int
    parameters: int
    blocks: int
    conversion_bytes: int


class GGUFFileError(ConfigError):
    """The GGUF file is malformed or inconsistent; the message names the file and the problem."""


def _open(path: str | Path) -> tuple[Path, int, Any]:
    """Checks 1 and 2: the path, its size and gguf's reader over it (the file memory-mapped, read once)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise GGUFFileError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    _check_header(path, size)
    return path, size, _read(path)


def read_architecture(path: str | Path) -> str:
    """Checks 1 and 2 only (the header reads as GGUF): the ``general.architecture`` field."""
    path, _, reader = _open(path)
    return _architecture(path, reader)


def tokenizer_flags(path: str | Path) -> dict[str, Any]:
    """The file's ``tokenizer.ggml.add_*`` flags (``add_bos_token``: True, ...), which transformers'
    GGUF tokenizer does not always honour."""
    _, _, reader = _open(path)
    prefix = "tokenizer.ggml."
    return {k[len(prefix):]: _field(reader, k) for k in reader.fields if k.startswith(prefix + "add_")}


def _architecture(path: Path, reader: Any) -> str:
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFFileError(f"{path} has no general.architecture field: it is not a model GGUF file")
    return arch


def check_gguf(path: str | Path, *, dtype: str = "float32", max_memory_gb: float | None = None,
               on_architecture: Callable[[str], None] | None = None) -> GGUFSummary:
    """Check ``path`` as described in the module docstring; `GGUFFileError` naming the first problem.

    ``on_architecture`` sees the architecture as soon as it is read, before the tensors are checked
    (a converter refuses one it cannot build there, with its own message).
    """
    path, size, reader = _open(path)
    arch = _architecture(path, reader)
    if on_architecture is not None:
        on_architecture(arch)
    tensors = _check_tensors(path, reader, size)
    blocks = _check_metadata(path, reader, arch, tensors)
    parameters = sum(n for _, n in tensors.values())
    need = 2 * parameters * _BYTES.get(dtype, 4) + (1 << 30)
    _check_memory(path, need, parameters, dtype, max_memory_gb)
    return GGUFSummary(architecture=arch, tensors=len(tensors), parameters=parameters, blocks=blocks,
                       conversion_bytes=need)


def _check_header(path: Path, size: int) -> None:
    if size < _HEADER:
        raise GGUFFileError(f"{path}: {size} bytes, shorter than a GGUF header ({_HEADER} bytes)")
    with open(path, "rb") as f:
        head = f.read(_HEADER)
    if head[:4] != _MAGIC:
        raise GGUFFileError(f"{path} is not a readable GGUF file: it starts with {head[:4]!r}, not b'GGUF'")
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:])
    if version not in _VERSIONS:
        raise GGUFFileError(f"{path}: GGUF version {version}, this reader takes versions {_VERSIONS}")
    room = size - _HEADER
    if n_kv * _MIN_KV > room or n_tensors * _MIN_TENSOR > room or n_kv * _MIN_KV + n_tensors * _MIN_TENSOR > room:
        raise GGUFFileError(f"{path}: the header claims {n_kv:,} metadata entries and {n_tensors:,} tensors, more than "
                            f"its {size:,} bytes can hold (cut short, or the counts are corrupt)")


def _read(path: Path) -> Any:
    from gguf import GGUFReader

    try:
        return GGUFReader(str(path))
    except Exception as exc:  # the reader's own checks, and numpy/struct errors on a file cut short
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise GGUFFileError(f"{path}: the GGUF header does not parse ({type(exc).__name__}: {why}): "
                            "the file is cut short or corrupt") from None


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return field.contents()
    except Exception:
        return None


def _check_tensors(path: Path, reader: Any, size: int) -> dict[str, tuple[list[int], int]]:
    """Name -> (shape, element count) of every tensor, each checked to lie within the file."""
    tensors: dict[str, tuple[list[int], int]] = {}
    for t in reader.tensors:
        name = str(t.name)
        shape = [int(d) for d in t.shape]
        if name in tensors:
            raise GGUFFileError(f"{path}: tensor {name!r} appears twice")
        if not shape or any(d <= 0 for d in shape):
            raise GGUFFileError(f"{path}: tensor {name!r} has shape {shape}")
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise GGUFFileError(f"{path}: tensor {name!r} ends at byte {end:,}, past the end of the file ({size:,} "
                                "bytes): the file is cut short")
        tensors[name] = (shape, int(t.n_elements))
    return tensors  # none at all: transformers says which architecture it could not build


def _check_metadata(path: Path, reader: Any, arch: str, tensors: dict[str, tuple[list[int], int]]) -> int:
    """The model the metadata describes is the model the tensors are; the number of blocks."""
    blocks_present = {int(m.group(1)) for name in tensors if (m := _BLOCK.match(name))}
    declared = _field(reader, f"{arch}.block_count")
    if declared is not None:
        if not isinstance(declared, int) or declared < 0:
            raise GGUFFileError(f"{path}: {arch}.block_count is {declared!r}")
        missing = sorted(set(range(declared)) - blocks_present)
        if missing or (blocks_present and max(blocks_present) >= declared):
            raise GGUFFileError(f"{path}: the metadata describes {declared:,} blocks ({arch}.block_count) but the file "
                                f"holds tensors for {len(blocks_present):,} (blk.0 to blk.{max(blocks_present, default=-1)}): "
                                "it does not contain the model its metadata describes")
    embd = tensors.get("token_embd.weight")
    width = _field(reader, f"{arch}.embedding_length")
    if embd is not None and isinstance(width, int) and width not in embd[0]:
        raise GGUFFileError(f"{path}: {arch}.embedding_length is {width:,} but token_embd.weight has shape {embd[0]}")
    vocab = reader.fields.get("tokenizer.ggml.tokens")
    if embd is not None and vocab is not None and len(vocab.data) not in embd[0]:
        raise GGUFFileError(f"{path}: the tokenizer has {len(vocab.data):,} tokens but token_embd.weight has shape "
                            f"{embd[0]}")
    ff = _field(reader, f"{arch}.feed_forward_length")
    up = tensors.get("blk.0.ffn_up.weight")
    if isinstance(ff, int) and up is not None and ff not in up[0]:
        raise GGUFFileError(f"{path}: {arch}.feed_forward_length is {ff:,} but blk.0.ffn_up.weight has shape {up[0]}")
    implied = _implied_parameters(reader, arch, len(vocab.data) if vocab is not None else 0)
    present = sum(n for _, n in tensors.values())
    if implied > 4 * present + 10_000_000:
        raise GGUFFileError(f"{path}: the metadata describes a model of about {implied:,} parameters but the file "
                            f"holds {present:,}: it does not contain the model its metadata describes")
    return len(blocks_present)


def _implied_parameters(reader: Any, arch: str, vocab: int) -> int:
    """A rough size of the model the metadata describes (what transformers would allocate), from its
    widths: embeddings plus, per block, attention (4 d^2 at most) and a gated MLP (3 d f)."""
    def number(key: str) -> int:
        value = _field(reader, f"{arch}.{key}")
        return value if isinstance(value, int) and value > 0 else 0

    width, ff, blocks = number("embedding_length"), number("feed_forward_length"), number("block_count")
    return vocab * width + blocks * (4 * width * width + 3 * width * ff)


def _check_memory(path: Path, need: int, parameters: int, dtype: str, max_memory_gb: float | None) -> None:
    limit_gb = max_memory_gb
    if limit_gb is None and os.environ.get(MEMORY_ENV, "").strip():
        try:
            limit_gb = float(os.environ[MEMORY_ENV])
        except ValueError:
            raise ConfigError(f"{MEMORY_ENV} must be a number of GB, got {os.environ[MEMORY_ENV]!r}") from None
    limit = int(limit_gb * 2**30) if limit_gb is not None else available_bytes()
    if limit is None or need <= limit:
        return
    where = f"the limit you set ({limit_gb:g} GB)" if limit_gb is not None else \
        f"the {limit / 2**30:.1f} GB this machine has available"
    raise GGUFFileError(f"{path}: converting it needs about {need / 2**30:.1f} GB ({parameters:,} parameters in {dtype}, "
                        f"twice over while transformers builds and saves the model), more than {where}; free memory, "
                        f"convert to bfloat16, or set {MEMORY_ENV} to raise the limit")
