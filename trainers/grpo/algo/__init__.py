"""Pure tensor functions in name→function tables: advantages, KL estimators, losses, presets."""
