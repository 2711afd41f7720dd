"""HTTP errors in the OpenAI wire shape.

Every failure a client can see is an :class:`ApiError`, so the HTTP layer has exactly one way to turn a
problem into a status code, a body and headers. The body is what the ``openai`` client parses into
``APIStatusError.body``: ``{"error": {"message", "type", "code", "param"}}``.

Retry policy travels with the error: the ``openai`` client retries 408/409/429/5xx on its own unless
the server says ``x-should-retry: false``. A 4xx that a retry cannot fix must say so, or the client
would send the same bad request three times (and a 409 ``conversation_fork_not_supported`` would be
retried pointlessly). A storage fault is the opposite: a 503 with ``Retry-After`` that the client
should retry.
"""

from __future__ import annotations

from typing import Any

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"

# Codes used in ``error.code``; named here so the HTTP layer and the tests agree on the spelling.
CODE_INVALID_JSON = "invalid_json"
CODE_INVALID_TYPE = "invalid_type"
CODE_INVALID_VALUE = "invalid_value"
CODE_UNKNOWN_PARAMETER = "unknown_parameter"
CODE_UNSUPPORTED_PARAMETER = "unsupported_parameter"
CODE_UNSUPPORTED_VALUE = "unsupported_value"
CODE_MISSING_PARAMETER = "missing_required_parameter"
CODE_MUTUALLY_EXCLUSIVE = "mutually_exclusive_parameters"
CODE_NOT_FOUND = "not_found"
CODE_PAYLOAD_TOO_LARGE = "payload_too_large"
CODE_CONVERSATION_LOCKED = "conversation_locked"
CODE_FORK_NOT_SUPPORTED = "conversation_fork_not_supported"
CODE_SERVICE_UNAVAILABLE = "service_unavailable"
CODE_SERVER_ERROR = "server_error"
CODE_NOT_IMPLEMENTED = "not_implemented"  # 501: an OpenAI endpoint this service cannot serve (CONTRACT.md)
CODE_PREVIOUS_RESPONSE_NOT_FOUND = "previous_response_not_found"  # 400, as the OpenAI API answers
# 400, as the OpenAI API answers: a well-formed request that refers to something the response or its chain
# does not have, or that the response's kind refuses. The OpenAI API calls these invalid requests, and its
# clients raise ``BadRequestError`` for them; the code says which rule was broken.
CODE_BACKGROUND_REQUIRED = "background_required"  # stream replay or cancel of a non-background response
CODE_TOOL_OUTPUT_REQUIRED = "tool_output_required"  # a turn after function calls that does not answer them all
CODE_TOOL_CALL_NOT_FOUND = "tool_call_not_found"  # a function_call_output whose call_id was never issued
CODE_APPROVAL_NOT_FOUND = "approval_request_not_found"  # an mcp_approval_response that answers nothing
CODE_ITEM_NOT_FOUND = "item_not_found"  # an item_reference that names no item of the chain's earlier turns
CODE_DUPLICATE_TOOL_NAME = "duplicate_tool_name"
CODE_DUPLICATE_CALL_OUTPUT = "duplicate_call_output"
# 409: the response's (or chain's) current state refuses a well-formed request; later it may not.
CODE_ALREADY_FINISHED = "response_already_finished"  # cancel of a completed/failed/incomplete response
CODE_STILL_RUNNING = "response_in_progress"  # delete before the run has stopped

_MAX_ECHO = 64


class ApiError(Exception):
    """An error that maps 1:1 to an HTTP response.

    Raised anywhere below the HTTP layer; caught once at the edge. ``retryable`` is a statement about
    the request, not the status: it decides the ``x-should-retry`` header. ``code`` is required: a client
    branches on it, and an error without one (``code: null``) tells it nothing.
    """

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        *,
        code: str,
        param: str | None = None,
        retryable: bool = False,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code
        self.message = message
        self.param = param
        self.retryable = retryable
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        """The JSON body, exactly the keys the OpenAI API sends (all four, ``None`` included)."""
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}

    def headers(self) -> dict[str, str]:
        """Headers that steer the client's automatic retries."""
        headers: dict[str, str] = {}
        if not self.retryable:
            headers["x-should-retry"] = "false"
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        return headers

    def __repr__(self) -> str:
        return f"ApiError({self.status}, code={self.code!r}, param={self.param!r}, message={self.message!r})"


def echo(value: object) -> str:
    """A short, quoted rendering of a client-supplied value for an error message.

    Hostile input (megabyte strings, control characters) must not be reflected verbatim.
    """
    return repr(str(value)[:_MAX_ECHO])


def invalid_request(message: str, *, code: str, param: str | None = None) -> ApiError:
    """400: the request is wrong and sending it again will not help."""
    return ApiError(400, INVALID_REQUEST, message, code=code, param=param)


def not_implemented(message: str) -> ApiError:
    """501: an endpoint of the OpenAI API this service does not serve; the message says why. Retrying
    cannot help, so ``x-should-retry: false``."""
    return ApiError(501, SERVER_ERROR, message, code=CODE_NOT_IMPLEMENTED)


def not_found(what: str, id: str) -> ApiError:
    """404 for an unknown or deleted id (the OpenAI API uses ``invalid_request_error`` here too)."""
    return ApiError(404, INVALID_REQUEST, f"{what} with id {echo(id)} not found.", code=CODE_NOT_FOUND)


def conflict(code: str, message: str, *, param: str | None = None) -> ApiError:
    """409: the response's (or chain's) current state refuses a well-formed request (``conversation_locked``,
    ``conversation_fork_not_supported``, ``response_already_finished``, ``response_in_progress``).

    Not retryable: the client's immediate automatic retries (sub-second) would hit the same busy
    chain; the caller decides when to try a new turn.
    """
    return ApiError(409, INVALID_REQUEST, message, code=code, param=param)


def service_unavailable(retry_after: int = 2) -> ApiError:
    """503 for a storage or backend fault: never a 500, and the client should come back later."""
    return ApiError(
        503,
        SERVER_ERROR,
        "The service is temporarily unavailable. Please retry.",
        code=CODE_SERVICE_UNAVAILABLE,
        retryable=True,
        retry_after=retry_after,
    )


def payload_too_large(limit: int) -> ApiError:
    """413 when the body exceeds ``limit`` bytes; checked before any parsing so big bodies stay cheap."""
    return ApiError(
        413,
        INVALID_REQUEST,
        f"Request body too large. The maximum is {limit} bytes.",
        code=CODE_PAYLOAD_TOO_LARGE,
    )
