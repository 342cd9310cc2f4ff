"""Can a tiny model learn key-lookup's two copies? A one-minute SFT probe, no rollouts.

Why this exists: `benchmarks/agentic_learning.py` (issue 13) takes ~5-10 minutes and its
reward stays 0 as long as the model cannot copy (the asked key into the call, the tool's
digits into the answer). Before a full run, ask the cheaper question here: with plain
supervised training on correct episodes (`key_lookup.expert_episode`, rendered by the tiny
chat template), does teacher-forced argmax at those positions reach 0.9, and after how many
steps? Every recipe change (model shape, learning rate, digits, what the loss covers) can be
checked in a minute or two per seed.

``--loss`` picks the tokens the loss covers:
  * ``all``: every assistant token (what SFT and MIX's expert rows do);
  * ``decisions``: only the key in the call and the answer digits (the tokens that depend on
    the episode's data; everything else is fixed format);
  * ``decisions-then-all``: ``decisions`` for ``--switch`` steps, then ``all``.

    python benchmarks/agentic_copy_probe.py --loss all --digits 1 --seed 1
    python benchmarks/agentic_copy_probe.py --loss decisions-then-all --switch 150 --digits 1

The last line printed is one JSON object: ``key_onset`` / ``value_onset`` (first step whose
20-step mean accuracy is >= 0.9, or null), the final accuracies, and seconds per step.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

WINDOW = 20
EXPERT = ROOT / "examples" / "data" / "key_lookup_expert.jsonl"
"""The shipped expert episodes: their ``tools`` are the schema rollouts render (agentic.toml's data)."""


class Example:
    """One rendered episode: token ids, the two loss masks, and where the key and the digits are."""

    def __init__(self, ids: list[int], assistant: list[bool], key_pos: int, value_pos: list[int]) -> None:
        self.ids = ids
        self.assistant = assistant
        self.key_pos = key_pos
        self.value_pos = value_pos
        decisions = {key_pos, *value_pos}
        self.decisions = [i in decisions for i in range(len(ids))]


def render(row: dict[str, Any], tok: Any, with_tools: bool) -> Example:
    from key_lookup import expert_episode

    tools = json.loads(EXPERT.read_text().splitlines()[0])["tools"]
    episode = expert_episode(row, tools)
    text = tok.apply_chat_template(episode["messages"], tools=tools if with_tools else None, tokenize=False)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    token_at = {start: i for i, (start, _) in enumerate(enc["offset_mapping"])}
    head = "<|im_start|>assistant\n"
    assistant, pos = [False] * len(enc["input_ids"]), 0
    while (pos := text.find(head, pos)) >= 0:  # each assistant turn, through its <|im_end|>
        start, end = pos + len(head), text.index("<|im_end|>", pos) + len("<|im_end|>")
        for char, i in token_at.items():
            assistant[i] = assistant[i] or start <= char < end
        pos = end
    key_char = text.index('"key": "') + len('"key": "')
    answer_char = text.rindex(head) + len(head)
    return Example(enc["input_ids"], assistant, token_at[key_char],
                   [token_at[answer_char + d] for d in range(len(row["answer"]))])


def windowed_model(spec: Any, window: int) -> tuple[Any, Any]:
    """`build_tiny_model`'s shape as a Qwen2 model with sliding-window attention in every layer.

    A question for the probe, not a served model: does attention confined to the last
    ``window`` tokens (the call is ~55 tokens after the key, the answer ~15 after the digits,
    the tool schema ~320 tokens before both) learn the copies where full attention does not?
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from verifiers.models.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    torch.manual_seed(spec.seed)
    cfg = Qwen2Config(
        vocab_size=len(tok), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads, max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=None, rms_norm_eps=1e-6, use_sliding_window=True, sliding_window=window, max_window_layers=0,
    )
    return Qwen2ForCausalLM(cfg), tok


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loss", choices=["all", "decisions", "decisions-then-all", "all-then-decisions"],
                    default="all")
    ap.add_argument("--switch", type=int, default=150, help="steps before the second loss of a two-stage --loss")
    ap.add_argument("--digits", type=int, default=3)
    ap.add_argument("--tools", choices=["schema", "signature", "none"], default="schema",
                    help="list the tool in the system turn as its JSON schema (vf-tiny's default), as a compact "
                         "signature (tool_format = 'signature', agentic.toml's), or not at all")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv_heads", type=int, default=2)
    ap.add_argument("--sliding_window", type=int, default=0,
                    help="> 0: a Qwen2-style model whose layers all attend to the last N tokens only "
                         "(probe only: the embedded engine does not apply sliding windows)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--print_every", type=int, default=50)
    a = ap.parse_args(argv)
    if str(ROOT / "environments" / "key_lookup") not in sys.path:  # runs from a clone without installing it
        sys.path.insert(0, str(ROOT / "environments" / "key_lookup"))
    import torch
    from key_lookup import make_rows

    from verifiers.models.tiny import TinyModelSpec, build_tiny_model

    torch.set_num_threads(1)
    spec = TinyModelSpec(hidden_size=a.hidden, intermediate_size=3 * a.hidden, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, seed=a.seed)
    model, tok = build_tiny_model(spec) if a.sliding_window <= 0 else windowed_model(spec, a.sliding_window)
    model.train()
    if a.tools == "signature":
        from verifiers.models.tiny import chat_template

        tok.chat_template = chat_template("signature")
    rng = random.Random(a.seed)
    data = [render(r, tok, a.tools != "none") for r in make_rows(2000, "ABDEFGHJ", 4, a.digits, rng)]
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    key_acc: list[float] = []
    value_acc: list[float] = []
    onset: dict[str, int | None] = {"key": None, "value": None}
    start = time.perf_counter()
    for step in range(1, a.steps + 1):
        batch = rng.sample(data, a.batch)
        decisions_only = (a.loss == "decisions" or (a.loss == "decisions-then-all" and step <= a.switch)
                          or (a.loss == "all-then-decisions" and step > a.switch))
        width = max(len(e.ids) for e in batch)
        ids = torch.full((a.batch, width), tok.pad_token_id)
        mask = torch.zeros(a.batch, width, dtype=torch.bool)
        for r, e in enumerate(batch):
            ids[r, : len(e.ids)] = torch.tensor(e.ids)
            mask[r, : len(e.ids)] = torch.tensor(e.decisions if decisions_only else e.assistant)
        logits = model(ids).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        target = mask[:, 1:]
        loss = -(logp * target).sum() / target.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # teacher-forced argmax at the key and the digits (position p is predicted at p-1)
            pred = logits.argmax(-1)
            key_acc.append(sum(int(pred[r, e.key_pos - 1] == ids[r, e.key_pos]) for r, e in enumerate(batch)) / a.batch)
            value_acc.append(sum(int(pred[r, p - 1] == ids[r, p]) for r, e in enumerate(batch) for p in e.value_pos)
                             / (a.batch * a.digits))
        for name, acc in (("key", key_acc), ("value", value_acc)):
            if onset[name] is None and sum(acc[-WINDOW:]) / len(acc[-WINDOW:]) >= 0.9:
                onset[name] = step
        if a.print_every and step % a.print_every == 0:
            print(f"step {step} loss {loss.item():.3f} key_acc {key_acc[-1]:.2f} value_acc {value_acc[-1]:.2f}",
                  file=sys.stderr, flush=True)
    out = {
        **vars(a),
        "key_onset": onset["key"],
        "value_onset": onset["value"],
        "key_acc_last": round(sum(key_acc[-WINDOW:]) / len(key_acc[-WINDOW:]), 3),
        "value_acc_last": round(sum(value_acc[-WINDOW:]) / len(value_acc[-WINDOW:]), 3),
        "s_per_step": round((time.perf_counter() - start) / a.steps, 4),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
