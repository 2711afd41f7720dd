"""The model and sampling parameters of ``POST /responses``: every parameter the ``openai`` client's
``ResponseCreateParams`` can send besides the ones the service acts on itself (``input``, ``stream``,
``store``, chains, tools), plus ``presence_penalty`` and ``frequency_penalty`` (Open Responses).

Each is validated as OpenAI documents it (types, ranges, enumerations; structured ones strictly against
the ``openai`` param types), stored on the response row's document under its OpenAI name (where an agent
reads it: ``record.doc[name]``) and echoed on the response object. The service never changes its own
behaviour for them: they are the agent's to honour.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from resilient.protocol.request_errors import one_of
from resilient.protocol.typed_check import check_typed

_SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority", "fast", "ultrafast")
_INCLUDABLE = ("file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
               "message.input_image.image_url", "computer_call_output.output.image_url",
               "code_interpreter_call.outputs", "reasoning.encrypted_content", "message.output_text.logprobs")


def _typed(module: str, name: str, *, many: bool = False) -> BeforeValidator:
    """A field checked strictly against ``openai.types.<module>.<name>`` (imported on first use)."""

    def check(value: object) -> object:
        import importlib

        found: Any = getattr(importlib.import_module(f"openai.types.{module}"), name)
        return check_typed(list[found] if many else found, value)

    return BeforeValidator(check)


def _create(name: str, *, many: bool = False) -> BeforeValidator:
    return _typed("responses.response_create_params", name, many=many)


class CreateParams(BaseModel):
    """The pass-through parameters (a base of ``CreateResponseRequest``); null means "not set"."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2, allow_inf_nan=False)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2, allow_inf_nan=False)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_output_tokens: int | None = Field(default=None, ge=16)
    max_tool_calls: int | None = Field(default=None, ge=0)
    parallel_tool_calls: bool | None = None
    truncation: Annotated[Literal["auto", "disabled"], one_of(("auto", "disabled"))] | None = None
    service_tier: Annotated[str, one_of(_SERVICE_TIERS)] | None = None
    user: str | None = Field(default=None, max_length=256)
    safety_identifier: str | None = Field(default=None, max_length=64)
    prompt_cache_key: str | None = Field(default=None, max_length=64)
    prompt_cache_retention: Annotated[str, one_of(("in_memory", "24h"))] | None = None
    include: list[Annotated[str, one_of(_INCLUDABLE)]] | None = None
    reasoning: Annotated[dict[str, Any], _typed("shared_params", "Reasoning")] | None = None
    text: Annotated[dict[str, Any], _typed("responses", "ResponseTextConfigParam")] | None = None
    prompt: Annotated[dict[str, Any], _typed("responses", "ResponsePromptParam")] | None = None
    context_management: Annotated[list[dict[str, Any]], _create("ContextManagement", many=True)] | None = None
    access_programs: Annotated[dict[str, Any], _create("AccessPrograms")] | None = None
    background_options: Annotated[dict[str, Any], _create("BackgroundOptions")] | None = None
    image: Annotated[dict[str, Any], _create("Image")] | None = None
    moderation: Annotated[dict[str, Any], _create("Moderation")] | None = None
    prompt_cache_options: Annotated[dict[str, Any], _create("PromptCacheOptions")] | None = None

    def model_params(self) -> dict[str, Any]:
        """The parameters sent (not null), by OpenAI name, JSON-ready: what the row's document stores."""
        return {name: getattr(self, name) for name in CreateParams.model_fields if getattr(self, name) is not None}
