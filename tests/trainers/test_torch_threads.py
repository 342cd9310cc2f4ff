"""The default number of torch threads follows the cores actually free."""

from __future__ import annotations

import os

import pytest

from trainers.grpo.dist.threads import choose_torch_threads, default_torch_threads, usable_cores


def test_threads_are_the_free_cores_shared_among_local_processes() -> None:
    cores = usable_cores()
    assert default_torch_threads(load=0.0) == cores
    assert default_torch_threads(load=float(cores)) == 1  # every core busy: one thread, never zero
    assert default_torch_threads(load=cores + 5.0) == 1
    if cores >= 2:
        assert default_torch_threads(load=cores - 1.0) == 1
        assert default_torch_threads(local_processes=2, load=0.0) == max(1, round(cores / 2))
    assert 1 <= default_torch_threads() <= cores  # this machine's real load


def test_an_explicit_choice_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_torch_threads(3) == (3, "torch_threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert choose_torch_threads(None) == (None, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    threads, why = choose_torch_threads(None)
    assert threads is not None and 1 <= threads <= usable_cores() and why.startswith("free cores of")
    assert os.environ.get("OMP_NUM_THREADS") is None
