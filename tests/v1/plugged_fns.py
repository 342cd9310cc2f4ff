"""A function plugged into a task by config in test_authoring (by file path)."""


def always_one(trace) -> float:
    return 1.0
