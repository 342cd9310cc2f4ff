"""verifiers/cli."""
