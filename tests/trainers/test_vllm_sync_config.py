"""Config and probe logic of the vLLM weight sync that need no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.grpo.config import load_config
from trainers.grpo.sync import probe as sync_probe
from verifiers.errors import ConfigError


def test_base_url_takes_one_a_list_or_comma_joined_urls() -> None:
    assert load_config(None, {"base_url": "http://a/v1"}).base_urls == ["http://a/v1"]
    assert load_config(None, {"base_url": ["http://a/v1", "http://b/v1"]}).base_urls == ["http://a/v1", "http://b/v1"]
    cfg = load_config(None, ["--base_url", "http://a/v1,http://b/v1"])
    assert cfg.base_urls == ["http://a/v1", "http://b/v1"]
    assert load_config(None, {}).base_urls == []


@pytest.mark.parametrize(("data", "message"), [
    ({"base_url": "http://a/v1", "vllm": {"num_servers": 1}}, "not both"),
    ({"base_url": []}, "empty list"),
    ({"weight_sync": "nccl"}, "is for vLLM servers"),
    ({"vllm": {"num_servers": 0}}, "vllm.num_servers"),
    ({"vllm": {"gpu": 1}}, "unknown key"),
])
def test_inconsistent_server_settings_are_refused(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, data)


def test_managed_vllm_overrides_from_the_command_line() -> None:
    cfg = load_config(None, ["--vllm.num_servers", "2", "--vllm.cpu_cores", '["0", "1"]'])
    assert cfg.vllm is not None and cfg.vllm.num_servers == 2 and cfg.vllm.cpu_cores == ["0", "1"]
    shipped = Path(__file__).resolve().parents[2] / "examples" / "configs" / "quickstart_vllm.toml"
    assert load_config(shipped).vllm is not None
    assert load_config(shipped, ["--vllm", "null", "--base_url", "http://127.0.0.1:8000/v1"]).vllm is None


def test_probe_comparison_reports_the_worst_position() -> None:
    check = sync_probe.compare("s", [-1.0, -2.0, -3.5], [-1.0, -2.25, -3.0])
    assert (check.max_abs_diff, check.position, check.served, check.trained) == (0.5, 2, -3.5, -3.0)
    assert not check.ok(1e-3) and check.ok(0.5)
    assert sync_probe.compare("s", [-1.0], [-1.0, -2.0]).max_abs_diff == float("inf")
    assert sync_probe.max_change(None, [-1.0]) == 0.0
    assert sync_probe.max_change([-1.0, -2.0], [-1.5, -2.0]) == 0.5


def test_tolerance_by_dtype() -> None:
    torch = pytest.importorskip("torch")
    assert sync_probe.default_tolerance(torch.float32) == 1e-3
    assert sync_probe.default_tolerance(torch.bfloat16) == 0.1


def test_probe_tolerance_follows_the_served_dtype_not_only_the_master_weights(tmp_path: Path) -> None:
    """float32 master weights (the default) against a bf16 checkpoint served in bf16: 16-bit tolerance."""
    import json

    torch = pytest.importorskip("torch")
    from trainers.grpo.sync.weight_sync import probe_tolerance

    fp32_model = torch.nn.Linear(2, 2)
    for dtype, over, expected in [("bfloat16", {}, 0.1), ("float32", {}, 1e-3),
                                  ("float32", {"mixed_precision": "bf16"}, 0.1),
                                  ("bfloat16", {"sync_verify_tol": 0.5}, 0.5)]:
        ckpt = tmp_path / dtype
        ckpt.mkdir(exist_ok=True)
        (ckpt / "config.json").write_text(json.dumps({"dtype": dtype}))
        cfg = load_config(None, {"model": str(ckpt), **over})
        assert probe_tolerance(cfg, fp32_model) == expected, (dtype, over)


def test_probe_ids_and_trainer_logprobs_on_a_tiny_model(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from verifiers.inference.engine.loading import load_model_and_tokenizer
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    model, tok = load_model_and_tokenizer(save_tiny_model(tmp_path / "m", TinyModelSpec(hidden_size=32)))
    ids = sync_probe.probe_token_ids(tok)
    assert ids == sync_probe.probe_token_ids(tok) and 10 < len(ids) <= 96
    assert tok.decode(ids).endswith(sync_probe.PROBE_REPLY)
    lps = sync_probe.trainer_logprobs(model, ids)
    assert len(lps) == len(ids) - 1 and all(lp < 0 for lp in lps)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(1.5)
    assert sync_probe.max_change(lps, sync_probe.trainer_logprobs(model, ids)) > 1e-3


def test_a_base_url_nobody_answers_is_a_clear_error_before_training(tmp_path) -> None:
    pytest.importorskip("torch")
    from trainers.grpo.sync.weight_sync import make_weight_sync
    from verifiers.inference.vllm.server import free_port

    cfg = load_config(None, {"base_url": f"http://127.0.0.1:{free_port()}/v1"})
    with pytest.raises(ConfigError, match=r"no server answers /health .*vf-vllm MODEL_DIR"):
        make_weight_sync(cfg, model=None, tokenizer=None, out=tmp_path)
