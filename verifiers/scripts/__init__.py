"""0.1.x path ``verifiers.scripts``: the command-line entry points, now in `verifiers.cli`."""
