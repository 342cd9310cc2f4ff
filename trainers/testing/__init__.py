"""Test tools for the trainer and the engine: a fake CUDA device, memory measurement."""
