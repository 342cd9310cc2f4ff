"""Reading a class's generic parameters (``Taskset[MyTask, MyConfig]``) at run time.

The v1 authoring style declares a taskset's task type and config type only as generic
arguments; building a taskset from keyword overrides needs those classes back.
"""

from __future__ import annotations

from typing import Any, get_args, get_origin


def concrete_type(cls: type, base: type) -> type | None:
    """The first generic argument along `cls`'s MRO that is a subclass of `base`."""
    for klass in cls.__mro__:
        for orig in getattr(klass, "__orig_bases__", ()):
            for arg in get_args(orig):
                target: Any = get_origin(arg) or arg
                if isinstance(target, type) and issubclass(target, base):
                    return target
    return None
