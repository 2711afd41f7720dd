"""Transparent spill of large JSON documents from Table properties to blobs.

Why: a Table string property holds at most 64 KiB (32 K UTF-16 code units) and an entity 1 MiB, but
a response's ``instructions`` or a tool output item can be far larger. Every JSON column is stored
as a pair ``<col>`` (inline JSON, or "") and ``<col>_blob`` (spill blob name, or ""): both are always
written, so a MERGE or a REPLACE never leaves a stale half behind.

Spill blobs are content-addressed (``<response_id>/<name>-<sha256 prefix>.json``): a writer that loses
an ETag race can never overwrite the blob the winner's row points to, and an idempotent retry writes
the same blob again. Superseded blobs stay until the response's spill prefix is deleted.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import suppress
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob.aio import ContainerClient

from resilient.protocol.sse import compact_json
from resilient.storage.errors import NotFound
from resilient.storage.ports import JsonDict

# 30,000 UTF-16 code units = 60,000 bytes, under the 65,536-byte property limit with room to spare.
# With one large column per entity this also keeps every entity far below 1 MiB.
DEFAULT_THRESHOLD_UNITS = 30_000


def dumps(value: Any) -> str:
    """Compact JSON, as stored everywhere in this package (the same bytes as an SSE frame's data)."""
    return compact_json(value)


def utf16_units(text: str) -> int:
    """Size of ``text`` as the Table service counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


class JsonSpill:
    """Packs a JSON document into entity properties, spilling to a blob when it is too large."""

    def __init__(self, container: ContainerClient, *, threshold_units: int = DEFAULT_THRESHOLD_UNITS) -> None:
        self._container = container
        self._threshold = threshold_units
        self.storage_calls = 0

    async def pack(self, response_id: str, column: str, name: str, value: JsonDict) -> dict[str, str]:
        """Return ``{column: json, column_blob: ""}`` or, when too large, upload and return the pointer.

        ``response_id`` and ``name`` must already be validated (they become part of a blob name).
        """
        text = dumps(value)
        if utf16_units(text) <= self._threshold:
            return {column: text, f"{column}_blob": ""}
        data = text.encode("utf-8")
        blob = f"{response_id}/{name}-{hashlib.sha256(data).hexdigest()[:32]}.json"
        self.storage_calls += 1
        await self._container.upload_blob(blob, data, overwrite=True)
        return {column: "", f"{column}_blob": blob}

    async def unpack(self, entity: dict[str, Any], column: str) -> JsonDict:
        """Read the document back from the entity (inline) or from its spill blob."""
        blob = entity.get(f"{column}_blob") or ""
        if blob:
            self.storage_calls += 1
            try:
                downloader = await self._container.download_blob(blob)
                raw = await downloader.readall()
            except ResourceNotFoundError as error:
                raise NotFound(f"spilled document {blob!r} is missing") from error
            parsed: JsonDict = json.loads(raw)
            return parsed
        text = entity.get(column) or ""
        if not text:
            raise NotFound(f"entity has no {column!r} document")
        inline: JsonDict = json.loads(text)
        return inline

    async def delete_prefix(self, prefix: str) -> None:
        """Delete every spill blob whose name starts with ``prefix`` (e.g. ``<response_id>/doc``)."""
        names: list[str] = []
        self.storage_calls += 1
        async for blob in self._container.list_blobs(name_starts_with=prefix):
            names.append(blob.name)
        for name in names:
            self.storage_calls += 1
            with suppress(ResourceNotFoundError):
                await self._container.delete_blob(name)
