"""A workflow's ``request_info`` as a ``function_call`` the client answers, and its answer as the typed value.

Why a function call: it names what is asked and carries data both ways, which a yes/no approval cannot.
The call's ``name`` comes from the request's type (``ReviewRequest`` → ``review_request``; a plain value
such as a ``str`` question → ``request_info``, the name Agent Framework's ``WorkflowAgent`` gives every
request). Its ``arguments`` are a JSON object::

    {"data": <the request data as JSON>, "response_type": "<what the answer must be>",
     "response_schema": <the JSON schema of the answer>}

The client answers with a ``function_call_output`` whose ``output`` is the answer: the text itself when a
``str`` is asked for, else JSON (``42``, ``true``, ``{"approved": true, "note": "ok"}``), parsed into the
requested type (dataclass, pydantic model, ...) with pydantic. The HTTP layer checks the output against
``response_schema`` before it accepts the turn (:mod:`resilient.http.typed_answers`), so a wrong answer is a
400 and the workflow keeps waiting. The ``call_id`` starts with :data:`CALL_ID_PREFIX`, which marks the
calls whose answers that check applies to.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import TypeAdapter, ValidationError

from resilient.agents.base import FunctionCall, PermanentAgentError
from resilient.typed_answers import CALL_ID_PREFIX

GENERIC_NAME = "request_info"
_PLAIN_TYPES = (str, int, float, bool, bytes, list, dict, tuple, set, type(None))


def function_name(request_type: Any) -> str:
    """A stable function name for requests of ``request_type`` (see the module docstring)."""
    if not isinstance(request_type, type) or request_type in _PLAIN_TYPES:
        return GENERIC_NAME
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", request_type.__name__).lower()
    snake = re.sub(r"[^a-z0-9_]", "_", snake).strip("_")
    return snake[:64] or GENERIC_NAME


def type_label(response_type: Any) -> str:
    """How the expected answer's type is named to the client (``str``, ``int``, ``Decision``...)."""
    return response_type.__name__ if isinstance(response_type, type) else str(response_type)


def as_function_call(event: Any) -> FunctionCall:
    """The ``function_call`` item that asks the client what the ``request_info`` event asks."""
    response_type = event.response_type
    arguments = {"data": _jsonable(event.data), "response_type": type_label(response_type),
                 "response_schema": _schema(response_type)}
    return FunctionCall(function_name(event.request_type), json.dumps(arguments, ensure_ascii=False),
                        call_id=CALL_ID_PREFIX + str(event.request_id), agent_defined=True)


def request_id_of(call_id: str) -> str | None:
    """The workflow request a call_id answers, or None when it is not one of ours."""
    return call_id[len(CALL_ID_PREFIX):] if call_id.startswith(CALL_ID_PREFIX) else None


def parse_answer(output: str, response_type: Any) -> Any:
    """The client's answer as the requested type. The HTTP layer has already checked it against the schema;
    a value pydantic still refuses is a permanent error naming the type."""
    if response_type is str:
        return output
    try:
        return TypeAdapter(response_type).validate_json(output)
    except ValidationError as error:
        raise PermanentAgentError(f"the answer to the workflow's request must be {type_label(response_type)}: "
                                  f"{error.errors()[0].get('msg', error)}") from error


def _schema(response_type: Any) -> dict[str, Any]:
    try:
        schema: dict[str, Any] = TypeAdapter(response_type).json_schema()
    except Exception:  # a type pydantic cannot describe: the answer is checked only by the parse
        return {}
    return schema


def _jsonable(data: Any) -> Any:
    try:
        return TypeAdapter(type(data)).dump_python(data, mode="json")
    except Exception:  # a type pydantic cannot dump: its text is the best the client can get
        return str(data)
