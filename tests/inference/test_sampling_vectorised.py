"""The batched logits processors and samplers against a per-row reference, and seeded independence."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from verifiers.inference.engine.sampling import (  # noqa: E402
    RowSampling,
    batch_params,
    gumbel_argmax,
    hashed_uniform,
    process_logits,
    sample,
)


def _row(**kw: object) -> RowSampling:
    base: dict[str, object] = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
    return RowSampling(**{**base, **kw})  # type: ignore[arg-type]


def test_a_mixed_batch_equals_each_row_processed_alone() -> None:
    torch.manual_seed(0)
    rows = [_row(temperature=0.7, top_k=5), _row(top_p=0.8), _row(min_p=0.1, temperature=1.3),
            _row(repetition_penalty=1.5, seed=3), _row(temperature=0.0), _row(repetition_penalty=0.8, top_k=3)]
    rows[3].seen, rows[5].seen = {1, 4, 7}, {0, 2}
    logits = torch.randn(len(rows), 40)
    together = process_logits(logits, rows)
    for i, r in enumerate(rows):
        assert torch.equal(together[i], process_logits(logits[i : i + 1], [r])[0])


def test_seeded_rows_do_not_depend_on_their_batch() -> None:
    torch.manual_seed(1)
    logits = torch.randn(4, 50)
    rows = [_row(seed=7, stream=1), _row(), _row(seed=9), _row(temperature=0.0)]
    gen = torch.Generator().manual_seed(0)
    together = sample(process_logits(logits, rows), rows, gen, [3, 0, 5, 0])
    alone = sample(process_logits(logits[:1], rows[:1]), rows[:1], None, [3])
    assert together[0] == alone[0]
    assert together[2] == sample(process_logits(logits[2:3], rows[2:3]), rows[2:3], None, [5])[0]
    assert together[3] == logits[3].argmax()
    # different positions give different draws over many tries
    draws = {int(sample(process_logits(logits[:1], rows[:1]), rows[:1], None, [p])[0]) for p in range(30)}
    assert len(draws) > 3


def test_hashed_uniforms_are_float32_strictly_inside_zero_one() -> None:
    u = hashed_uniform(torch.tensor([0, 1, -5, 2**40], dtype=torch.int64), 4096)
    assert u.dtype == torch.float32
    assert float(u.min()) > 0.0 and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.02
    g = -torch.log(-torch.log(u))
    assert torch.isfinite(g).all()


@pytest.mark.parametrize("vocab", [50, 20_000, 49_152])
def test_noise_made_a_few_rows_at_a_time_picks_what_the_whole_batchs_noise_picks(vocab: int) -> None:
    """The CPU path hashes rows in cache-sized chunks (one row at a time for a real vocabulary): the
    tokens must be the full-batch Gumbel-max's, ties to the lowest id, -inf never chosen."""
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(9, vocab, generator=gen) * 3
    logits[0, :] = 0.0  # all tied: the noise alone decides
    logits[1, ::2] = float("-inf")
    keys = torch.randint(-(2**40), 2**40, (9,), generator=gen)
    u = hashed_uniform(keys, vocab)
    expected = torch.argmax(logits + -torch.log(-torch.log(u)), dim=1)
    chosen = gumbel_argmax(logits, keys)
    assert torch.equal(chosen, expected)
    assert int(chosen[1]) % 2 == 1
    # one row alone draws what it drew in the batch
    assert all(int(gumbel_argmax(logits[i : i + 1], keys[i : i + 1])[0]) == int(chosen[i]) for i in range(9))


def test_batch_params_index_only_sampled_rows() -> None:
    p = batch_params([_row(temperature=0.0), _row(seed=1), _row()], 10, torch.device("cpu"))
    assert p.free_idx is not None and p.free_idx.tolist() == [2]
    assert p.seeded_idx is not None and p.seeded_idx.tolist() == [1]
    assert not (p.needs_k or p.needs_p or p.needs_min_p or p.needs_penalty)
