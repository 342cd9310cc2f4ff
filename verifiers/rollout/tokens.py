"""Token-exact training sequences from the token ids the server returned.

Multi-turn training data must not be rebuilt by re-tokenising the transcript
through the chat template: templates are not prefix-stable across turns and the
re-tokenised text differs from what was sampled. Instead, each model call
records the prompt ids the server saw and the ids it sampled. Turn k+1's prompt
starts with turn k's prompt + completion; what follows is environment or tool
text, which is kept for context but masked out of the loss.
"""

from __future__ import annotations

# TokenSequence and assemble_tokens live in verifiers.types (RolloutResult.token_sequence
# returns one); this module keeps the old import path.
from verifiers.types import TokenSequence, TurnTokens, assemble_tokens

__all__ = ["TokenSequence", "TurnTokens", "assemble_tokens"]
