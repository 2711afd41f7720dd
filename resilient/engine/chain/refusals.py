"""The answers a lifecycle rule gives instead of a result; the HTTP layer turns each into its status."""

from __future__ import annotations


class Refused(Exception):
    """The response's (or chain's) state refuses the request: the API answers 409 with ``code``."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class Invalid(Refused):
    """The request can never succeed for this response (e.g. cancelling a non-background one): the API
    answers 400, as OpenAI does."""


class NotStored(Exception):
    """No stored response by that id for a client: unknown, malformed, deleted or ``store=false``."""


class Contended(Exception):
    """A compare-and-swap kept losing to other writers: the API answers 503 and the client retries."""
