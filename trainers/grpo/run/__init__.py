"""What surrounds the loop: checkpoints, metrics logs, the run watch, signals and the console."""
