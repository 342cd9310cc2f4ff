"""``/weights/reload`` is all or nothing, and ``--reload-dir`` confines where it reads.

Before the fix, a checkpoint with one layer too many was copied tensor by tensor until
``load_state_dict`` complained: the server answered 500 and went on serving a mix of old
and new weights under an unchanged ``weight_version``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .conftest import assert_openai_error, post_json, request, serving

torch = pytest.importorskip("torch")


def _tiny(path: Path, **spec: Any) -> Path:
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    return save_tiny_model(path, TinyModelSpec(**spec))


@pytest.fixture
def restore(engine: Any) -> Any:
    saved = {k: v.clone() for k, v in engine.model.state_dict().items()}
    yield saved
    engine.update_weights(saved)


def _same(engine: Any, saved: dict[str, Any]) -> bool:
    now = engine.model.state_dict()
    return all(torch.equal(now[k], v) for k, v in saved.items())


def test_mismatched_checkpoint_changes_nothing(engine: Any, restore: dict[str, Any], tmp_path: Path) -> None:
    bigger = _tiny(tmp_path / "three-layers", num_hidden_layers=3, seed=7)  # layers 0-1 match by shape
    with serving(engine) as srv:
        version = request(srv.base, "GET", "/weights/version")[1]["weight_version"]
        status, body = post_json(srv.base, "/weights/reload", {"path": str(bigger)})
        err = assert_openai_error(status, body, 400, "path")
        assert "layers.2" in err["message"] and "nothing was changed" in err["message"]
        assert request(srv.base, "GET", "/weights/version")[1]["weight_version"] == version
    assert _same(engine, restore)


def test_shape_mismatch_in_one_tensor_changes_nothing(engine: Any, restore: dict[str, Any]) -> None:
    from verifiers.errors import ConfigError

    state = {k: v.clone() + 1.0 for k, v in restore.items()}
    name = next(k for k in state if "mlp" in k)
    state[name] = torch.zeros(3, 3)
    version = engine.weight_version
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        engine.update_weights(state)
    assert engine.weight_version == version
    assert _same(engine, restore)


def test_reload_dir_confines_reload_paths(engine: Any, restore: dict[str, Any], tmp_path: Path) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    good = _tiny(allowed / "ckpt", seed=3)
    other = _tiny(outside / "ckpt", seed=4)
    os.symlink(other, allowed / "link")
    with serving(engine, reload_dir=allowed) as srv:
        version = request(srv.base, "GET", "/weights/version")[1]["weight_version"]
        for path in (other, allowed / ".." / "outside" / "ckpt", allowed / "link", Path("/etc")):
            status, body = post_json(srv.base, "/weights/reload", {"path": str(path)})
            assert_openai_error(status, body, 403, "path")
        assert _same(engine, restore)
        status, body = post_json(srv.base, "/weights/reload", {"path": str(good)})
        assert status == 200 and body["weight_version"] == version + 1
    assert not _same(engine, restore)
