"""Model clients: OpenAI-compatible HTTP (aiohttp transport) and adapters."""

from verifiers.clients.aiohttp_client import AiohttpChatClient
from verifiers.clients.openai_client import (
    ChatClient,
    OpenAIChatClient,
    SyncOpenAIChatClient,
    as_chat_client,
    get_model_response,
    make_client,
    map_openai_error,
)
from verifiers.clients.response import ModelResponse, parse_chat_response, parse_completion_response

__all__ = [
    "AiohttpChatClient",
    "ChatClient",
    "ModelResponse",
    "OpenAIChatClient",
    "SyncOpenAIChatClient",
    "as_chat_client",
    "get_model_response",
    "make_client",
    "map_openai_error",
    "parse_chat_response",
    "parse_completion_response",
]
