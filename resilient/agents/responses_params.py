"""The request's model parameters (``AgentRequest.params``, OpenAI Responses names) as Responses API
arguments: what the sample agent's model path passes with each model call when ``RESILIENT_MODEL_API`` is
``responses``.

The Responses API takes them under the names the request used: ``temperature``, ``top_p``,
``max_output_tokens`` (per model call, so per phase), ``top_logprobs``, ``parallel_tool_calls``,
``reasoning`` (``effort`` and ``summary``), ``text`` (``format``, ``verbosity``), ``truncation``,
``max_tool_calls``, ``prompt_cache_key``, ``prompt_cache_retention``, ``safety_identifier``,
``service_tier``, ``user`` and ``include``. Not sent, as the Responses API has no such argument:
``presence_penalty``, ``frequency_penalty``.

Every call is made with ``store: false`` (this service keeps the conversation; the model need not) and
``include`` gains ``reasoning.encrypted_content``: with nothing stored at the model, the encrypted reasoning
is how the model's reasoning reaches its next call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SAME_NAME = ("temperature", "top_p", "max_output_tokens", "top_logprobs", "parallel_tool_calls", "reasoning",
             "text", "truncation", "max_tool_calls", "prompt_cache_key", "prompt_cache_retention",
             "safety_identifier", "service_tier", "user")
ENCRYPTED_REASONING = "reasoning.encrypted_content"


def responses_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Responses API keyword arguments for ``params`` (see the module docstring)."""
    found = {name: params[name] for name in SAME_NAME if params.get(name) is not None}
    include = [str(value) for value in params.get("include") or []]
    found["include"] = include if ENCRYPTED_REASONING in include else [*include, ENCRYPTED_REASONING]
    found["store"] = False
    return found
