"""The Conversations API's bodies and query values: ``POST /conversations`` (``items``, ``metadata``),
``POST /conversations/{id}`` (``metadata``), ``POST /conversations/{id}/items`` (``items``) and ``include``.

Items are the same input items ``POST /responses`` takes (one parser, so both accept the same kinds), at
most 20 per request as the OpenAI API allows, stored with new ids. Every failure is a 400 naming the
``param`` (``items[0].content``), as for ``POST /responses``.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from openai.types.responses.response_includable import ResponseIncludable
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, field_validator

from resilient.ids import new_conversation_item_id
from resilient.protocol import errors
from resilient.protocol.errors import invalid_request
from resilient.protocol.input_items import INPUT_ITEMS, InputItem, normalize_input_items
from resilient.protocol.request import _reject_unpaired_surrogates, check_metadata
from resilient.protocol.request_errors import _fail_type, _fail_value, _json_kind, api_error_from_validation

MAX_ITEMS = 20  # per create or items.create, as the OpenAI API allows
INCLUDABLE: frozenset[str] = frozenset(typing.get_args(ResponseIncludable))
_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)


def _check_items(value: object) -> object:
    if not isinstance(value, list):
        _fail_type("items", "an array of input items", value)
    if len(value) > MAX_ITEMS:  # before any item is parsed
        _fail_value("items", f"array too long: expected at most {MAX_ITEMS} items, got {len(value)}.")
    items = INPUT_ITEMS.validate_python(value, strict=True)
    seen: set[str] = set()
    for i, item in enumerate(items):  # the stored id: one per item, as in POST /responses (request.py)
        if item.id is not None:
            if item.id in seen:
                _fail_value(f"items[{i}].id", f"Duplicate item found with id {errors.echo(item.id)}.")
            seen.add(item.id)
    return items


class CreateConversation(BaseModel):
    """``POST /conversations``. ``safety_identifier`` is accepted and ignored."""

    model_config = _STRICT

    items: list[InputItem] | None = None
    metadata: Annotated[dict[str, str] | None, AfterValidator(check_metadata)] = None
    safety_identifier: str | None = None

    @field_validator("items", mode="before")
    @classmethod
    def _check(cls, value: object) -> object:
        return value if value is None else _check_items(value)


class UpdateConversation(BaseModel):
    """``POST /conversations/{id}``: ``metadata`` (required; null clears it)."""

    model_config = _STRICT

    metadata: Annotated[dict[str, str] | None, AfterValidator(check_metadata)]


class CreateItems(BaseModel):
    """``POST /conversations/{id}/items``: ``items`` (1-20)."""

    model_config = _STRICT

    items: list[InputItem]

    @field_validator("items", mode="before")
    @classmethod
    def _check(cls, value: object) -> object:
        return _check_items(value)


@dataclass(frozen=True)
class _Listed:
    listed: list[InputItem]

    def items(self) -> list[InputItem]:
        return self.listed


def stored_items(items: list[InputItem] | None) -> list[dict[str, Any]]:
    """The items as stored and listed (each with a new id, typed by its kind as the OpenAI API does)."""
    return normalize_input_items(_Listed(list(items or [])), new_conversation_item_id, new_conversation_item_id)


def _body(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        raise invalid_request("The request body is not valid JSON.", code=errors.CODE_INVALID_JSON) from None
    if not isinstance(data, dict):
        raise invalid_request(f"The request body must be a JSON object, got {_json_kind(data)}.",
                              code=errors.CODE_INVALID_JSON)
    _reject_unpaired_surrogates(data)
    return data


def parse[M: BaseModel](model: type[M], raw: bytes) -> M:
    """Validate a body against ``model``; every failure is an ``ApiError`` 400 naming its ``param``."""
    try:
        return model.model_validate(_body(raw))
    except ValidationError as exc:
        raise api_error_from_validation(exc) from None


def check_include(values: Sequence[str]) -> list[str]:
    """``include`` values (``include=…`` or ``include[]=…``, repeated): accepted when OpenAI knows them, and
    without effect (the items this service stores carry none of those extras)."""
    for value in values:
        if value not in INCLUDABLE:
            raise invalid_request(f"Invalid value for 'include': {errors.echo(value)}. Supported values are: "
                                  f"{', '.join(sorted(INCLUDABLE))}.", code=errors.CODE_INVALID_VALUE,
                                  param="include")
    return list(values)
