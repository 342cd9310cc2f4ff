"""0.1.x path ``verifiers.utils.env_utils``: `load_environment` by id."""

from verifiers.envs.loader import load_environment

__all__ = ["load_environment"]
