"""Seeded number-theory problems that are tedious by hand and easy with a few lines of Python.

Answers are computed here, in-process, with straightforward exact integer code; the
problem parameters are kept in ``info`` so an answer can be re-derived (and tests can
check it with an independent implementation).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from functools import cache
from itertools import accumulate
from typing import Any

__all__ = ["KINDS", "make_examples", "solve"]

MAX_PRIME_LIMIT = 200_000


@cache
def _prime_flags(limit: int = MAX_PRIME_LIMIT) -> bytes:
    """Sieve of Eratosthenes: ``flags[k] == 1`` iff k is prime, for k < limit."""
    flags = bytearray([1]) * limit
    flags[0:2] = b"\x00\x00"
    for p in range(2, math.isqrt(limit - 1) + 1):
        if flags[p]:
            flags[p * p :: p] = bytes(len(range(p * p, limit, p)))
    return bytes(flags)


@cache
def _prime_prefix() -> tuple[list[int], list[int]]:
    """``(count[k], total[k])``: how many primes are below k and their sum, for k <= MAX_PRIME_LIMIT.

    Prefix tables make each sum/count problem O(1), so building a 1000-example split
    costs one sieve rather than one scan per example.
    """
    flags = _prime_flags()
    count = [0, *accumulate(flags)]
    total = [0, *accumulate(k if flag else 0 for k, flag in enumerate(flags))]
    return count, total


def _count_primes_below(n: int) -> int:
    return _prime_prefix()[0][n]


def _sum_primes_below(n: int) -> int:
    return _prime_prefix()[1][n]


def _digit_sum(n: int) -> int:
    return sum(map(int, str(n)))


def _collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _num_divisors(n: int) -> int:
    count, d = 1, 2
    while d * d <= n:
        e = 0
        while n % d == 0:
            n //= d
            e += 1
        count *= e + 1
        d += 1
    return count * (2 if n > 1 else 1)


# kind -> (question template, parameter sampler, solver)
_Kind = tuple[str, Callable[[random.Random], dict[str, int]], Callable[..., int]]

KINDS: dict[str, _Kind] = {
    "sum_primes": (
        "What is the sum of all prime numbers less than {n}?",
        lambda rng: {"n": rng.randint(1_000, MAX_PRIME_LIMIT)},
        _sum_primes_below,
    ),
    "count_primes": (
        "How many prime numbers are there less than {n}?",
        lambda rng: {"n": rng.randint(1_000, MAX_PRIME_LIMIT)},
        _count_primes_below,
    ),
    "factorial_digit_sum": (
        "What is the sum of the decimal digits of {n}! ({n} factorial)?",
        lambda rng: {"n": rng.randint(25, 400)},
        lambda n: _digit_sum(math.factorial(n)),
    ),
    "power_digit_sum": (
        "What is the sum of the decimal digits of 2 to the power {n}?",
        lambda rng: {"n": rng.randint(100, 3_000)},
        lambda n: _digit_sum(2**n),
    ),
    "num_divisors": (
        "How many positive divisors does {n} have?",
        lambda rng: {"n": _smooth_number(rng)},
        _num_divisors,
    ),
    "collatz_steps": (
        "Starting from {n}, repeatedly replace n by n/2 if n is even and by 3n+1 if n is odd. "
        "How many steps does it take to reach 1?",
        lambda rng: {"n": rng.randint(1_000, 1_000_000)},
        _collatz_steps,
    ),
    "fibonacci_mod": (
        "With F(0) = 0, F(1) = 1 and F(k) = F(k-1) + F(k-2), what is F({n}) modulo {m}?",
        lambda rng: {"n": rng.randint(200, 5_000), "m": rng.randint(1_000, 1_000_000)},
        lambda n, m: _fibonacci(n) % m,
    ),
}


def _smooth_number(rng: random.Random) -> int:
    """A number below 10**9 with small prime factors, so its divisor count is interesting."""
    while True:
        n = 1
        for p in (2, 3, 5, 7, 11, 13, 17):
            n *= p ** rng.randint(0, 4 if p < 10 else 2)
        if 1_000 <= n < 10**9:
            return n


def solve(kind: str, params: dict[str, int]) -> int:
    """The answer to the problem ``kind`` with ``params`` (as stored in ``info``)."""
    return KINDS[kind][2](**params)


def make_examples(
    n: int, rng: random.Random, kinds: list[str], exclude: set[str] | None = None
) -> list[dict[str, Any]]:
    """``n`` distinct problems, kinds in round-robin order (none of them in ``exclude``, which is updated)."""
    seen = exclude if exclude is not None else set()
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        kind = kinds[len(rows) % len(kinds)]
        template, sample, _ = KINDS[kind]
        params = sample(rng)
        question = template.format(**params)
        if question in seen:
            continue
        seen.add(question)
        rows.append(
            {"question": question, "answer": str(solve(kind, params)), "info": {"kind": kind, **params}}
        )
    return rows
