"""Build the public response object from a stored row plus its checkpointed output items.

Shared by the engine (snapshots inside ``response.*`` events) and the HTTP layer (``GET /responses/{id}``),
so a client that rebuilds a response from the stream and one that polls see the same object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from resilient.protocol.response import build_response
from resilient.protocol.response_params import MODEL_PARAM_NAMES
from resilient.storage.ports import ResponseRecord

DEFAULT_MODEL = "offline-research-agent"


def response_object(
    record: ResponseRecord, output: Sequence[dict[str, Any]], *, status: str | None = None
) -> dict[str, Any]:
    doc = record.doc
    return build_response(
        response_id=record.response_id,
        created_at=int(doc.get("created_at", 0)),
        model=str(doc.get("model") or DEFAULT_MODEL),
        status=status or record.status,
        output=list(output),
        background=bool(doc.get("background", False)),
        store=bool(doc.get("store", True)),
        instructions=doc.get("instructions"),
        metadata=doc.get("metadata"),
        previous_response_id=doc.get("previous_response_id"),
        conversation_id=doc.get("conversation_id"),
        error=doc.get("error"),
        incomplete_details=doc.get("incomplete_details"),
        usage=doc.get("usage"),
        completed_at=doc.get("completed_at"),
        tools=doc.get("tools"),
        tool_choice=doc.get("tool_choice") or "auto",
        params={name: doc[name] for name in MODEL_PARAM_NAMES if doc.get(name) is not None},
    )
