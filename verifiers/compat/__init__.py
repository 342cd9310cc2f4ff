"""The verifiers 0.1.x compatibility layer: adapters that let old environments run unchanged."""
