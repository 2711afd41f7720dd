"""The request's model parameters (``AgentRequest.params``, OpenAI Responses names) as Chat Completions
arguments: what the sample agent's model path passes with each model call.

Same name in both APIs: ``temperature``, ``top_p``, ``presence_penalty``, ``frequency_penalty``,
``service_tier``, ``user``, ``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_retention``.
Renamed: ``max_output_tokens`` → ``max_completion_tokens`` (each phase is one model call, so the limit holds
per phase), ``top_logprobs`` → ``logprobs`` + ``top_logprobs``, ``reasoning.effort`` → ``reasoning_effort``,
``text.format`` → ``response_format``, ``text.verbosity`` → ``verbosity``. ``parallel_tool_calls`` is sent
only with tools (Chat Completions rejects it without). Not sent, as Chat Completions has no such argument:
``truncation``, ``max_tool_calls``, ``include``, ``reasoning.summary``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SAME_NAME = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "service_tier", "user",
             "safety_identifier", "prompt_cache_key", "prompt_cache_retention")


def chat_params(params: Mapping[str, Any], *, has_tools: bool) -> dict[str, Any]:
    """Chat Completions keyword arguments for ``params`` (see the module docstring)."""
    found = {name: params[name] for name in SAME_NAME if params.get(name) is not None}
    if params.get("max_output_tokens") is not None:
        found["max_completion_tokens"] = params["max_output_tokens"]
    if params.get("top_logprobs") is not None:
        found["logprobs"] = True
        found["top_logprobs"] = params["top_logprobs"]
    if has_tools and params.get("parallel_tool_calls") is not None:
        found["parallel_tool_calls"] = params["parallel_tool_calls"]
    reasoning = params.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort"):
        found["reasoning_effort"] = reasoning["effort"]
    text = params.get("text")
    if isinstance(text, Mapping):
        if isinstance(text.get("format"), Mapping):
            found["response_format"] = response_format(text["format"])
        if text.get("verbosity"):
            found["verbosity"] = text["verbosity"]
    return found


def response_format(text_format: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses ``text.format`` (``text``, ``json_object`` or a flat ``json_schema``) in the Chat
    Completions shape, where a JSON schema's fields sit under ``json_schema``."""
    if text_format.get("type") != "json_schema":
        return {"type": str(text_format.get("type") or "text")}
    schema = {key: text_format[key] for key in ("name", "schema", "description", "strict")
              if text_format.get(key) is not None}
    return {"type": "json_schema", "json_schema": schema}
