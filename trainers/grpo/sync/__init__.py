"""Trainer → inference server: the one upstream write (weights), by engine, reload or NCCL."""
