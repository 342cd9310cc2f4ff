"""The verifiers 0.1.x ``verifiers.utils.*`` paths.

The 0.1.x helper modules that published environments import
(``verifiers.utils.data_utils``, ``verifiers.utils.async_utils``,
``verifiers.utils.tools``, ...) are submodules; they are thin layers over the core
and are only imported when asked for. Nothing in the core imports this package.
`maybe_await` (on a *value*) and `callable_name` live in `verifiers._helpers`
and are re-exported here for code that imported them from this namespace.
"""

from __future__ import annotations

from verifiers._helpers import callable_name, maybe_await

__all__ = ["callable_name", "maybe_await"]
