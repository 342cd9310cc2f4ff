"""Rollouts → whole groups → `TrainBatch`: prompt order, generation, the experience store, batches."""
