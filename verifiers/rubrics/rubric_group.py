"""0.1.x path ``verifiers.rubrics.rubric_group``."""

from verifiers.rubrics.rubric import RubricGroup

__all__ = ["RubricGroup"]
