"""Moved to `verifiers.models.tiny`; kept so old imports (and ``python -m verifiers.inference.tiny``) work.

Nothing in verifiers or trainers imports this path (tests/test_layers.py checks); import
`verifiers.models.tiny` instead.
"""

from verifiers.models.tiny import *  # noqa: F403
from verifiers.models.tiny import main

if __name__ == "__main__":
    raise SystemExit(main())
