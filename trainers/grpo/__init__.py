"""trainers/grpo."""
