"""The GRPO trainer (``vf-train``).

Entry modules at the top: ``cli`` (the console script), ``config`` (``TrainConfig``) and
``trainer`` (``GRPOTrainer``, the loop). Everything else lives in folders whose imports run
one way. A folder may import only the folders *before* it in this order (and ``verifiers``);
the top modules may import anything:

1. ``algo``  -- pure tensor functions in name→function tables (advantages, KL, losses, presets)
2. ``dist``  -- which process am I; collectives; the CPU launcher
3. ``data``  -- rollouts → whole groups → ``TrainBatch`` (sampler, generator, store, batch, feed)
4. ``learn`` -- the policy and its update (log-probabilities, learner step, warm-up, LoRA)
5. ``sync``  -- trainer → inference server, the one upstream write (imports no sibling folder)
6. ``ray``   -- rollouts and the store across machines (subclasses the data generator)
7. ``run``   -- what surrounds the loop (checkpoints, reporting, watch, signals, display)

Why ``dist`` sits below ``data`` while ``ray`` sits above it: the step feed calls the
collectives, and the Ray generator subclasses the in-process one.
"""

LAYERS = ("algo", "dist", "data", "learn", "sync", "ray", "run")
"""The allowed folder order: a folder imports only folders before it."""
