"""`Taskset`: the data half of a v1 environment, config in and tasks out.

A taskset package exports one `Taskset` subclass in ``__all__``; its ``load()`` yields tasks
(one task type per taskset). Iterating sets each task's ``idx`` to its position in ``load()``
and applies the config's ``system_prompt`` file. Views (`take`, `skip`, `shuffle`, `include`,
`exclude`) are lazy copies, chainable in any order.
"""

from __future__ import annotations

import copy
import itertools
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Self

from typing_extensions import TypeVar

from verifiers.v1._generic import concrete_type
from verifiers.v1.configs import TasksetConfig
from verifiers.v1.task import Task, TaskT

if TYPE_CHECKING:
    from verifiers.v1.toolset import Toolset

TasksetConfigT = TypeVar("TasksetConfigT", bound=TasksetConfig, default=TasksetConfig)
Transform = Callable[[Iterator[Any]], Iterator[Any]]


def _idx_ranges(specs: Iterable[int | str]) -> list[range]:
    """``3`` → [3], ``"2:5"`` → 2..4, ``"7:"`` → 7.. (open)."""
    out = []
    for spec in specs:
        if isinstance(spec, int) or ":" not in str(spec):
            out.append(range(int(spec), int(spec) + 1))
            continue
        start, _, stop = str(spec).partition(":")
        out.append(range(int(start or 0), int(stop) if stop else 2**62))
    return out


class Taskset(ABC, Generic[TaskT, TasksetConfigT]):
    INFINITE: bool = False
    """Whether ``load()`` yields forever (bound it with `take` before evaluating)."""
    transform: Transform | None = None

    def __init__(self, config: TasksetConfigT | None = None) -> None:
        self.config: TasksetConfigT = config if config is not None else self.config_type()()  # type: ignore[assignment]
        override = self.config.system_prompt
        self.system_prompt = override.read_text() if override is not None else None

    @abstractmethod
    def load(self) -> Iterable[TaskT]:
        """Build and yield the tasks; may be a generator."""

    def __iter__(self) -> Iterator[TaskT]:
        update = {} if self.system_prompt is None else {"system_prompt": self.system_prompt}
        tasks: Iterator[TaskT] = (task.with_data(idx=i, **update) for i, task in enumerate(self.load()))  # type: ignore[misc]
        return tasks if self.transform is None else self.transform(tasks)

    # -- views ---------------------------------------------------------------------------
    def _view(self, transform: Transform) -> Self:
        clone = copy.copy(self)
        prev = self.transform
        clone.transform = transform if prev is None else (lambda tasks: transform(prev(tasks)))
        return clone

    def take(self, num_tasks: int) -> Self:
        view = self._view(lambda tasks: itertools.islice(tasks, num_tasks))
        view.INFINITE = False
        return view

    def skip(self, num_tasks: int) -> Self:
        return self._view(lambda tasks: itertools.islice(tasks, num_tasks, None))

    def shuffle(self, seed: int = 0) -> Self:
        if self.INFINITE:
            raise ValueError(f"{type(self).__name__} is infinite: bound it with take(n) before shuffle()")

        def shuffled(tasks: Iterator[Any]) -> Iterator[Any]:
            items = list(tasks)
            random.Random(seed).shuffle(items)
            return iter(items)

        return self._view(shuffled)

    def _matcher(
        self, idx: Iterable[int | str], ids: Iterable[str], names: Iterable[str]
    ) -> Callable[[Task], bool]:
        ranges, id_set, name_set = _idx_ranges(idx), set(ids), set(names)
        return lambda t: (
            any(t.data.idx in r for r in ranges) or t.data.id in id_set or t.data.name in name_set
        )

    def include(
        self, idx: Iterable[int | str] = (), ids: Iterable[str] = (), names: Iterable[str] = ()
    ) -> Self:
        """Keep the tasks named by position (``5``, ``"0:100"``), ``id`` or ``name``."""
        hit = self._matcher(idx, ids, names)
        return self._view(lambda tasks: (t for t in tasks if hit(t)))

    def exclude(
        self, idx: Iterable[int | str] = (), ids: Iterable[str] = (), names: Iterable[str] = ()
    ) -> Self:
        hit = self._matcher(idx, ids, names)
        return self._view(lambda tasks: (t for t in tasks if not hit(t)))

    # -- types and servers ---------------------------------------------------------------
    @classmethod
    def task_type(cls) -> type[Task]:
        return concrete_type(cls, Task) or Task

    @classmethod
    def config_type(cls) -> type[TasksetConfig]:
        return concrete_type(cls, TasksetConfig) or TasksetConfig

    @classmethod
    def toolsets(cls, config: Any) -> list[Toolset]:
        """Tool servers shared by every rollout of the taskset (one instance, set up once)."""
        return []
