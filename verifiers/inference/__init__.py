"""verifiers/inference."""
