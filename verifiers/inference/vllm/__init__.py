"""Managing vLLM servers: what `vf-vllm` and the trainer's ``server = "vllm"`` use instead of the engine.

``server`` starts and stops one ``vllm serve`` process (`server.VLLMServer`), ``admin`` talks to its
control routes (weights, pause, sleep; `admin.VLLMAdmin`), ``guard`` is the ASGI middleware that puts
the API key in front of every route (vLLM loads it by import path). Nothing here imports vLLM
itself, the engine or the HTTP server: vLLM runs in its own process.
"""
