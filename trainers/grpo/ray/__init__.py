"""Rollouts and the experience store across machines (Ray workers and a store actor)."""
