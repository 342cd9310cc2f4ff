"""Inference: ``engine/`` (continuous batching, KV slots, decoding paths), ``server/`` (the OpenAI
HTTP API, `vf-serve`) and ``vllm/`` (managing vLLM servers, `vf-vllm`). The server and vllm sit
above the engine, never the reverse (tests/test_layers.py). Nothing else lives at this level.
"""
