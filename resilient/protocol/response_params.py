"""The names of the create parameters a response object echoes, and what it reports for one not sent.

Apart from the request models (``create_params.py``), because every response snapshot reads them and a
worker that only runs phases must not load the request models (pydantic, tens of milliseconds) for that.
``tests/unit/test_create_params.py`` keeps ``MODEL_PARAM_NAMES`` equal to ``CreateParams``' fields.
"""

from __future__ import annotations

from typing import Any

MODEL_PARAM_NAMES: tuple[str, ...] = (
    "temperature", "top_p", "presence_penalty", "frequency_penalty", "top_logprobs", "max_output_tokens",
    "max_tool_calls", "parallel_tool_calls", "truncation", "service_tier", "user", "safety_identifier",
    "prompt_cache_key", "prompt_cache_retention", "include", "reasoning", "text", "prompt", "context_management",
    "access_programs", "background_options", "image", "moderation", "prompt_cache_options",
)
# What the response object reports for a parameter that was not sent: the value that describes what the
# service did (default sampling, plain text, no limits), as the OpenAI API and Open Responses report it.
RESPONSE_DEFAULTS: dict[str, Any] = {
    "max_output_tokens": None,
    "max_tool_calls": None,
    "parallel_tool_calls": True,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "prompt_cache_key": None,
    "reasoning": {"effort": None, "summary": None},
    "safety_identifier": None,
    "service_tier": "default",
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "top_logprobs": 0,
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}
# Echoed only when sent (the response object has them, Open Responses does not require them). Not echoed:
# ``include``, ``context_management``, ``background_options`` and ``stream_options`` (the response object has
# no such field), ``image`` and ``moderation`` (its fields of those names report what the service applied,
# in another shape); they are stored all the same.
ECHOED_WHEN_SENT: tuple[str, ...] = ("prompt", "prompt_cache_retention", "access_programs", "prompt_cache_options")
