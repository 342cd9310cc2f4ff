"""`convert_gguf`: a GGUF becomes a save_pretrained directory that loads as the model it was made from."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from verifiers.errors import ConfigError
from verifiers.inference.engine.loading import load_tokenizer
from verifiers.models import gguf as gguf_mod
from verifiers.models.gguf import convert_gguf, find_gguf, gguf_architecture, supported_architectures

CHAT = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "the hell"}]


def _logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def test_converted_model_computes_what_the_original_did(tiny_gguf: Any, converted_tiny: Path) -> None:
    from transformers import AutoModelForCausalLM

    names = {p.name for p in converted_tiny.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json",
            "gguf_source.json"} <= names
    cfg = json.loads((converted_tiny / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["dtype"] == "float32"
    assert "quantization_config" not in cfg  # the GGUF marker is gone, so anything can load and save it
    source = json.loads((converted_tiny / "gguf_source.json").read_text())
    assert source["architecture"] == "llama" and source["gguf_file"] == tiny_gguf.path.name
    assert converted_tiny.name == f"{source['sha256'][:16]}-float32"

    model = AutoModelForCausalLM.from_pretrained(converted_tiny).eval()
    tok = load_tokenizer(converted_tiny)
    ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    # q/k rows were permuted llama.cpp's way when written: logits only match if transformers undid it.
    assert torch.equal(_logits(model, ids), _logits(tiny_gguf.reference, ids))
    text = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou are a tiny test model.<|im_end|>\n")
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.convert_ids_to_tokens(tok.encode("hello")) == ["hell", "o"]  # the merges survived
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_quantized_weights_are_dequantized(tmp_path: Path, gguf_writer: Callable[..., Any]) -> None:
    from transformers import AutoModelForCausalLM

    q8 = gguf_writer(tmp_path / "tiny.Q8_0.gguf", quantize=True)
    out = convert_gguf(q8.path, cache_dir=tmp_path / "cache", log=lambda line: None)
    model = AutoModelForCausalLM.from_pretrained(out)
    ref = dict(q8.reference.named_parameters())
    for name, p in model.named_parameters():
        err = (p - ref[name]).abs().max().item()
        assert err <= 0.01 * ref[name].abs().max().item(), name  # Q8_0: within a 1/127 step per block
    assert any(not torch.equal(p, ref[n]) for n, p in model.named_parameters())  # it really was quantized


def test_reused_by_content_hash_and_converted_per_dtype(tiny_gguf: Any, tmp_path: Path) -> None:
    from safetensors import safe_open

    lines: list[str] = []
    cache = tmp_path / "cache"
    first = convert_gguf(tiny_gguf.path, cache_dir=cache, log=lines.append)
    assert len(lines) == 2 and lines[0].startswith(f"converting {tiny_gguf.path.name} (1 MB) to float32 "
                                                   f"safetensors in {first} …")
    assert lines[1].startswith(f"converted {tiny_gguf.path.name} in ") and lines[1].endswith(" s")
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copy(tiny_gguf.path, copy)
    lines.clear()
    assert convert_gguf(copy, cache_dir=cache, log=lines.append) == first  # same bytes, same directory
    assert convert_gguf(copy.parent, cache_dir=cache, log=lines.append) == first  # the directory holding it
    assert lines == [] and (first / "model.safetensors").stat().st_mtime_ns == stamp

    bf16 = convert_gguf(tiny_gguf.path, dtype="bfloat16", cache_dir=cache, log=lines.append)
    assert bf16 != first and bf16.name.endswith("-bfloat16") and len(lines) == 2
    assert json.loads((bf16 / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(str(bf16 / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}  # noqa: SIM118


def test_dtype_other_than_float32_or_bfloat16_is_refused(tiny_gguf: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dtype must be one of float32, bfloat16"):
        convert_gguf(tiny_gguf.path, dtype="float16", cache_dir=tmp_path)


def test_concurrent_callers_convert_once(tiny_gguf: Any, tmp_path: Path) -> None:
    lines: list[str] = []
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(convert_gguf(tiny_gguf.path, cache_dir=tmp_path / "cache", log=lines.append))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 3 and len(set(results)) == 1
    assert sum(line.startswith("converting ") for line in lines) == 1


def test_an_interrupted_conversion_leaves_nothing_behind(tiny_gguf: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real = gguf_mod._dequantize_and_save

    def dies_half_way(src: Path, out: Path, **kw: Any) -> None:
        real(src, out, **kw)  # everything written ...
        raise KeyboardInterrupt  # ... then Ctrl-C before the rename

    monkeypatch.setattr(gguf_mod, "_dequantize_and_save", dies_half_way)
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(tiny_gguf.path, cache_dir=cache, log=lambda line: None)
    assert list((cache / "converted").iterdir()) == []  # no directory a later run could take for finished
    monkeypatch.setattr(gguf_mod, "_dequantize_and_save", real)
    out = convert_gguf(tiny_gguf.path, cache_dir=cache, log=lambda line: None)
    assert [p.name for p in (cache / "converted").iterdir()] == [out.name]


def _write_header_only_gguf(path: Path, arch: str) -> Path:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("not a real model")
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_unsupported_architecture_is_named_with_the_supported_ones(tmp_path: Path) -> None:
    src = _write_header_only_gguf(tmp_path / "rwkv.gguf", "rwkv7")
    assert gguf_architecture(src) == "rwkv7"
    assert "rwkv7" not in supported_architectures() and "llama" in supported_architectures()
    with pytest.raises(ConfigError) as err:
        convert_gguf(src, cache_dir=tmp_path / "cache", log=lambda line: None)
    msg = str(err.value)
    assert "rwkv.gguf is a 'rwkv7' model, an architecture the installed transformers cannot dequantize" in msg
    assert "llama" in msg and "qwen2" in msg
    assert list((tmp_path / "cache" / "converted").iterdir()) == []


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 this is a zip, not a GGUF" * 10)
    with pytest.raises(ConfigError, match=r"model\.gguf is not a readable GGUF file"):
        convert_gguf(bad, cache_dir=tmp_path / "cache", log=lambda line: None)


def test_find_gguf(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "m.Q4.gguf").write_bytes(b"")
    (tmp_path / "one" / "README.md").write_text("x")
    (tmp_path / "two").mkdir()
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / "two" / name).write_bytes(b"")
    assert find_gguf(tmp_path / "one") == tmp_path / "one" / "m.Q4.gguf"
    assert find_gguf(tmp_path / "one" / "m.Q4.gguf") == tmp_path / "one" / "m.Q4.gguf"
    assert find_gguf(tmp_path / "one" / "README.md") is None
    assert find_gguf(tmp_path / "two") is None  # ambiguous
    assert find_gguf(tmp_path / "missing") is None
    with pytest.raises(ConfigError, match=r"not a \.gguf file nor a directory holding exactly one"):
        convert_gguf(tmp_path / "two", cache_dir=tmp_path / "cache")


def test_missing_extra_names_the_install_command(tiny_gguf: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = gguf_mod.importlib.util.find_spec
    monkeypatch.setattr(gguf_mod.importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name))
    with pytest.raises(ConfigError) as err:
        convert_gguf(tiny_gguf.path, cache_dir=tmp_path / "cache", log=lambda line: None)
    assert "converting a GGUF file needs gguf, which comes with the gguf extra: pip install" in str(err.value)
    assert "[gguf]" in str(err.value)
