"""What an endpoint returns, and how every failure becomes the OpenAI error shape (never a 500 for client input)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from resilient.agents.kinds import AgentLoadError
from resilient.engine.chain.refusals import Contended, Invalid, NotStored, Refused
from resilient.protocol import errors
from resilient.protocol.errors import ApiError
from resilient.storage.errors import NotFound, StorageUnavailable

log = logging.getLogger("resilient.http")


@dataclass
class HttpResult:
    status: int
    body: Any = None
    stream: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def error_result(error: ApiError) -> HttpResult:
    return HttpResult(error.status, error.body(), headers=error.headers())


@contextmanager
def translated(response_id: str) -> Iterator[None]:
    """The engine's refusals as the API's errors: each refusal keeps its code and message, and gets its status."""
    try:
        yield
    except Invalid as invalid:  # before Refused: a subclass with another status
        raise errors.invalid_request(invalid.message, code=invalid.code, param=invalid.param) from None
    except Refused as refused:
        raise errors.conflict(refused.code, refused.message, param=refused.param) from None
    except NotStored:
        raise errors.not_found("Response", response_id) from None
    except Contended:
        raise errors.service_unavailable() from None


async def guarded(call: Any) -> HttpResult:
    """Run a handler and map every failure to the OpenAI error shape (never a 500 for client input)."""
    try:
        result: HttpResult = await call
        return result
    except ApiError as exc:
        return error_result(exc)
    except StorageUnavailable:
        return error_result(errors.service_unavailable())
    except NotFound:
        return error_result(errors.ApiError(404, errors.INVALID_REQUEST, "Not found.", code=errors.CODE_NOT_FOUND))
    except TimeoutError:
        return error_result(errors.service_unavailable())
    except AgentLoadError as exc:  # RESILIENT_AGENT names something unusable: say what (logged once where found)
        return error_result(errors.ApiError(500, errors.SERVER_ERROR, str(exc), code=errors.CODE_SERVER_ERROR))
    except Exception:
        log.exception("unhandled error")
        return error_result(errors.ApiError(500, errors.SERVER_ERROR, "The server had an error processing the "
                                            "request.", code=errors.CODE_SERVER_ERROR, retryable=True))
