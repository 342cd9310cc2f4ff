"""GGUF files as untrusted input: every malformed or inconsistent file is one line naming the file and
the problem, within seconds, before anything is allocated, and leaves nothing in the cache."""

from __future__ import annotations

import os
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from verifiers.errors import ConfigError
from verifiers.models.gguf import convert_gguf
from verifiers.models.gguf_check import MEMORY_ENV, GGUFFileError, check_gguf

pytestmark = pytest.mark.filterwarnings("ignore")


def _copy(tiny_gguf: Any, tmp_path: Path, name: str = "m.gguf") -> Path:
    dst = tmp_path / name
    shutil.copy(tiny_gguf.path, dst)
    return dst


def _set_field(path: Path, key: str, value: int) -> None:
    """Rewrite a numeric metadata field in place (the reader memory-maps the file read-write)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path), "r+")
    reader.fields[key].parts[-1][0] = value
    reader.data.flush()
    del reader


def _refused(path: Path, cache: Path, match: str) -> str:
    """convert_gguf refuses ``path`` with one line naming it, fast, and the cache holds no model."""
    t = time.perf_counter()
    with pytest.raises(GGUFFileError) as err:
        convert_gguf(path, cache_dir=cache, log=lambda line: None)
    msg = str(err.value)
    assert time.perf_counter() - t < 30
    assert msg.startswith(str(path)) and "\n" not in msg, msg
    assert __import__("re").search(match, msg), msg
    converted = cache / "converted"
    assert not converted.exists() or not any(converted.iterdir())  # nothing half-written either
    return msg


@pytest.mark.parametrize("share", [0.0003, 0.002, 0.01, 0.03, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999])
def test_a_file_cut_short_anywhere_is_one_line(tiny_gguf: Any, tmp_path: Path, share: float) -> None:
    path = _copy(tiny_gguf, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: max(1, int(len(data) * share))])
    _refused(path, tmp_path / "cache", r"(shorter than a GGUF header|more than its .* bytes can hold|does not parse"
                                        r"|past the end of the file|cut short)")


@pytest.mark.parametrize(("offset", "value", "match"), [
    (4, struct.pack("<I", 99), "GGUF version 99"),
    (8, struct.pack("<Q", 2**60), "claims .* tensors, more than"),
    (16, struct.pack("<Q", 2**40), "claims 1,099,511,627,776 metadata entries"),
])
def test_absurd_header_fields_are_refused_from_the_header(tiny_gguf: Any, tmp_path: Path, offset: int, value: bytes,
                                                          match: str) -> None:
    path = _copy(tiny_gguf, tmp_path)
    data = bytearray(path.read_bytes())
    data[offset:offset + len(value)] = value
    path.write_bytes(bytes(data))
    _refused(path, tmp_path / "cache", match)


def test_metadata_describing_a_model_the_file_does_not_hold(tiny_gguf: Any, tmp_path: Path) -> None:
    path = _copy(tiny_gguf, tmp_path)
    _set_field(path, "llama.block_count", 10_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _refused(path, tmp_path / "cache", r"describes 10,000 blocks .* holds tensors for 2 \(blk.0 to blk.1\)")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB: nothing was built
    wide = _copy(tiny_gguf, tmp_path, "wide.gguf")
    _set_field(wide, "llama.embedding_length", 8192)
    _refused(wide, tmp_path / "cache", r"embedding_length is 8,192 but token_embd.weight has shape")
    ffn = _copy(tiny_gguf, tmp_path, "ffn.gguf")
    _set_field(ffn, "llama.feed_forward_length", 10_000_000)  # transformers would build a 15 GB MLP from it
    _refused(ffn, tmp_path / "cache", r"feed_forward_length is 10,000,000 but blk.0.ffn_up.weight has shape")


def test_metadata_implying_a_far_larger_model_is_refused_even_without_the_tensor_to_compare(
        tmp_path: Path) -> None:
    from verifiers.models.gguf_check import _implied_parameters

    class Field:
        def __init__(self, value: int) -> None:
            self.value = value

        def contents(self) -> int:
            return self.value

    class Reader:
        fields = {"llama.embedding_length": Field(4096), "llama.feed_forward_length": Field(14336),
                  "llama.block_count": Field(32)}

    assert 6.5e9 < _implied_parameters(Reader(), "llama", 32000) < 8.5e9  # a Llama-7B-shaped description


def test_the_memory_a_conversion_needs_is_checked_against_the_limit(tiny_gguf: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    summary = check_gguf(tiny_gguf.path)
    assert summary.architecture == "llama" and summary.blocks == 2 and summary.parameters > 0
    monkeypatch.setenv(MEMORY_ENV, "0.5")
    _refused(_copy(tiny_gguf, tmp_path), tmp_path / "cache",
             rf"needs about 1\.0 GB .* more than the limit you set \(0\.5 GB\).*set {MEMORY_ENV} to raise the limit")
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(ConfigError, match=f"{MEMORY_ENV} must be a number of GB, got 'lots'"):
        check_gguf(tiny_gguf.path)
    monkeypatch.setenv(MEMORY_ENV, "64")
    assert check_gguf(tiny_gguf.path).conversion_bytes < 64 * 2**30


@pytest.mark.slow
@pytest.mark.parametrize("command", [["verifiers.cli.serve", "{path}", "--port", "0"],
                                     ["trainers.grpo.cli", "--model", "{path}", "--env_id", "letter-repeat",
                                      "--max_steps", "1", "--output_dir", "{out}"]])
def test_entry_points_exit_with_one_line(tiny_gguf: Any, tmp_path: Path, command: list[str]) -> None:
    path = _copy(tiny_gguf, tmp_path)
    path.write_bytes(path.read_bytes()[:5000])
    args = [a.format(path=path, out=tmp_path / "run") for a in command]
    env = {**os.environ, "VF_MODEL_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert str(path) in done.stderr and ("does not parse" in done.stderr or "can hold" in done.stderr), done.stderr
