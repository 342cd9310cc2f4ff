"""The policy and its update: log-probabilities, the learner step, SFT warm-up, LoRA."""
