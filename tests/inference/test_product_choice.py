"""Packed products or ``F.linear``: measured per machine (`verifiers.inference.engine.product_choice`).

Which is faster is the CPU's (oneDNN's prepacked product is 2-3x MKL's on an AMD EPYC, level with
it on an Intel Xeon, where the packing only costs), so the choice is measured; a user relies on
it being taken from the timings, on the margin keeping a near tie unpacked, and on the reason a
log shows.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from verifiers.inference.engine import product_choice  # noqa: E402
from verifiers.inference.engine.product_choice import choose, layer_shapes, measure  # noqa: E402
from verifiers.models.tiny import TinyModelSpec, build_tiny_model  # noqa: E402

SHAPES = ((32, 64), (32, 32), (32, 96), (48, 32))


@pytest.fixture(autouse=True)
def _fresh_cache() -> Any:
    measure.cache_clear()
    yield
    measure.cache_clear()


def _timed(monkeypatch: pytest.MonkeyPatch, packed_s: float, plain_s: float) -> list[str]:
    """Each side's work timed as given; returns the sides in the order they were timed."""
    order: list[str] = []

    def seconds(fns: list[Any]) -> float:
        side = fns[0].__name__
        assert {fn.__name__ for fn in fns} == {side}  # one side's products at a time
        order.append(side)
        return packed_s if side == "packed" else plain_s

    monkeypatch.setattr(product_choice, "_seconds", seconds)
    return order


@pytest.mark.parametrize(("packed_s", "plain_s", "packed"), [(1.0, 2.0, True), (2.0, 1.0, False),
                                                             (0.97, 1.0, False)],
                         ids=["packing-faster", "f-linear-faster", "near-tie-keeps-f-linear"])
@pytest.mark.parametrize("use", ["inference", "trained", "frozen"])
def test_the_choice_follows_the_timings(monkeypatch: pytest.MonkeyPatch, use: str, packed_s: float,
                                        plain_s: float, packed: bool) -> None:
    order = _timed(monkeypatch, packed_s, plain_s)
    got = measure(SHAPES, use, 1)
    assert got.packed is packed and got.use == use and got.rows == product_choice.ROWS[use]
    assert got.packed_ms == pytest.approx(packed_s * 1e3) and got.plain_ms == pytest.approx(plain_s * 1e3)
    assert order == ["packed", "plain"] * product_choice.REPEATS  # interleaved rounds
    if packed:
        assert got.reason() is None
    else:
        assert got.reason() == (f"F.linear is as fast here ({use} products of one layer at {got.rows} rows: "
                                f"packed {packed_s * 1e3:.2f} ms, F.linear {plain_s * 1e3:.2f} ms)")


def test_a_model_is_measured_at_its_fused_layer_shapes_once_per_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = build_tiny_model(TinyModelSpec(arch="qwen2", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                              num_attention_heads=4, num_key_value_heads=2))
    assert layer_shapes(model) == ((64, 64 + 32 + 32), (64, 64), (64, 320), (160, 64))
    order = _timed(monkeypatch, 1.0, 2.0)
    first = choose(model, "trained")
    assert choose(model, "trained") is first  # cached: the products run once per process
    assert len(order) == 2 * product_choice.REPEATS
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        choose(model, "trained")
    finally:
        torch.set_num_threads(threads)
    assert len(order) == 4 * product_choice.REPEATS  # another thread count is measured again


@pytest.mark.parametrize("use", ["inference", "trained", "frozen"])
def test_the_real_measurement_times_both_sides(use: str) -> None:
    got = measure(SHAPES, use, torch.get_num_threads())
    assert got.packed_ms > 0 and got.plain_ms > 0
    assert got.packed is (got.packed_ms < product_choice.MARGIN * got.plain_ms)
