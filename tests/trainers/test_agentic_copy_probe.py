"""The key-lookup SFT probe marks the right tokens and reports its figures.

The probe (benchmarks/agentic_copy_probe.py) is how recipe ideas for issue 13 are screened
before a full run, so its masks must be exactly what it claims: the decision tokens are the
key inside the call and the answer's digits, and the 'all' mask is every assistant token.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probe() -> Any:
    spec = importlib.util.spec_from_file_location("agentic_copy_probe", ROOT / "benchmarks" / "agentic_copy_probe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path.insert(0, str(ROOT / "environments" / "key_lookup"))
    yield module
    sys.path.remove(str(ROOT / "environments" / "key_lookup"))


@pytest.mark.parametrize("with_tools", [True, False])
def test_decision_tokens_are_the_key_in_the_call_and_the_answer_digits(probe: Any, with_tools: bool) -> None:
    from key_lookup import make_rows

    from verifiers.models.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    row = make_rows(1, "ABDEFGHJ", 4, 3, random.Random(7))[0]
    ex = probe.render(row, tok, with_tools)
    text = tok.decode(ex.ids)
    assert ("<tools>" in text) == with_tools
    assert tok.decode([ex.ids[ex.key_pos]]) == row["info"]["key"]
    assert tok.decode([ex.ids[p] for p in ex.value_pos]) == row["answer"]
    assert [i for i, d in enumerate(ex.decisions) if d] == [ex.key_pos, *ex.value_pos]
    trained = "".join(tok.decode([t]) for t, m in zip(ex.ids, ex.assistant, strict=True) if m)
    key = row["info"]["key"]
    assert trained == (f'<tool_call>{{"name": "lookup", "arguments": {{"key": "{key}"}}}}</tool_call><|im_end|>'
                       f'{row["answer"]}<|im_end|>')


def test_a_short_run_prints_its_figures_as_json(probe: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = probe.main(["--tools", "none", "--steps", "3", "--batch", "2", "--loss", "decisions-then-all",
                      "--switch", "1", "--print_every", "0"])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == out
    for key in ("key_onset", "value_onset", "key_acc_last", "value_acc_last", "s_per_step"):
        assert key in last
    assert 0.0 <= last["key_acc_last"] <= 1.0 and 0.0 <= last["value_acc_last"] <= 1.0


def test_the_windowed_model_sees_only_its_window(probe: Any) -> None:
    """With a window of 4 in both layers a position sees 6 tokens back at most, and does see those."""
    import torch

    from verifiers.models.tiny import TinyModelSpec

    model, tok = probe.windowed_model(TinyModelSpec(), 4)
    ids = torch.tensor([tok("look up the key A, then answer")["input_ids"][:20]])
    base = model(ids).logits[0, -1]
    far, near = ids.clone(), ids.clone()
    far[0, 0] = (far[0, 0] + 1) % len(tok)  # 19 tokens back: outside 2 x (4 - 1)
    near[0, 17] = (near[0, 17] + 1) % len(tok)  # 2 tokens back: inside
    torch.testing.assert_close(model(far).logits[0, -1], base)
    assert not torch.allclose(model(near).logits[0, -1], base)


def test_a_windowed_run_prints_its_figures(probe: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = probe.main(["--tools", "none", "--steps", "2", "--batch", "2", "--sliding_window", "64",
                      "--loss", "all-then-decisions", "--switch", "1", "--print_every", "0"])
    assert out["sliding_window"] == 64 and 0.0 <= out["value_acc_last"] <= 1.0
