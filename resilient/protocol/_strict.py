"""Strict validation against the ``openai`` types, shared by the ``validate_*`` helpers.

The ``openai`` models accept unknown keys silently (``extra="allow"``) and coerce ``"0"`` to ``0``, so a
misspelt field (``output_idx``) or a stringly number would validate and then surprise some client.
"Strict" here therefore means: the value validates in pydantic strict mode (no coercion), and no key
lands in a model's extras except the few the real API sends that the client's types do not declare
(listed by ``known_untyped``).

Why the ``openai`` types are imported inside the functions: they take about half a second to import, and
the service only validates with them in tests; a cold worker must not pay for them before its first
request.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError


@functools.cache
def known_untyped() -> frozenset[tuple[type[BaseModel], str]]:
    """(model class, key): keys the OpenAI API sends but the installed types do not declare."""
    from openai.types.responses import Response

    return frozenset({(Response, "store"), (Response, "presence_penalty"), (Response, "frequency_penalty")})


@functools.cache
def _adapter(type_: Any) -> TypeAdapter[Any]:
    # Building an adapter for a 60-member union costs milliseconds; do it once per type.
    return TypeAdapter(type_)


def unexpected_fields(value: object, path: str = "") -> list[str]:
    """Paths of keys that validated only as extras, i.e. keys no client will ever read."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        for key in value.model_extra or {}:
            if (type(value), key) not in known_untyped():
                found.append(f"{path}.{key}" if path else key)
        for name in type(value).model_fields:
            found.extend(unexpected_fields(getattr(value, name), f"{path}.{name}" if path else name))
    elif isinstance(value, list | tuple):
        for index, element in enumerate(value):
            found.extend(unexpected_fields(element, f"{path}[{index}]"))
    elif isinstance(value, dict):
        for key, element in value.items():
            found.extend(unexpected_fields(element, f"{path}.{key}"))
    return found


def strict_validate(type_: Any, value: object, *, what: str) -> Any:
    """Validate ``value`` as ``type_`` and reject unknown keys; raise ValueError naming ``what``."""
    try:
        result = _adapter(type_).validate_python(value, strict=True)
    except ValidationError as exc:
        raise ValueError(f"{what} does not validate: {exc}") from exc
    extra = unexpected_fields(result)
    if extra:
        raise ValueError(f"{what} has keys unknown to the client types: {', '.join(extra)}")
    return result
