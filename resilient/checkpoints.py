"""Agent Framework workflow checkpoints in Azure Table and Blob storage: a ``CheckpointStorage`` to import.

Use it for workflows you run yourself (a script, a queue-triggered function) when their checkpoints should
outlive the process, in the same storage account as this service::

    from resilient.checkpoints import AzureCheckpointStorage

    async with AzureCheckpointStorage() as storage:  # AzureWebJobsStorage's account
        async for event in workflow.run("go", checkpoint_storage=storage, stream=True): ...
        latest = await storage.get_latest(workflow_name=workflow.name)
        async for event in build().run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage, stream=True): ...

A workflow this service hosts (``RESILIENT_AGENT``) needs none: the service checkpoints it with each step.

Each checkpoint is a blob (``<container>/<checkpoint id>.json``, the JSON Agent Framework's own storage
writes) and a table row (partition: the checkpoint id) that names its workflow and time, for listing.
Encoding and decoding go through Agent Framework's public ``FileCheckpointStorage``
(:mod:`resilient.agents.framework.step_checkpoints`): values JSON cannot hold are pickled, and a load
builds only allowed types (Python's value types, Agent Framework's and the OpenAI SDK's, the types
registered with ``agent_framework.register_checkpoint_type``, and ``allowed_checkpoint_types``); a save
that would not load again is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from types import TracebackType
from typing import Any, Self

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables.aio import TableClient
from azure.storage.blob.aio import ContainerClient

from resilient.agents.framework.step_checkpoints import decode_checkpoint, encode_checkpoint

DEFAULT_NAME = "workflowcheckpoints"
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")  # a checkpoint id that is safe as a row key and a blob name


class AzureCheckpointStorage:
    """Agent Framework's ``CheckpointStorage`` over Azure Table and Blob storage (see the module docstring).

    ``connection_string``: the storage account (default: the ``AzureWebJobsStorage`` app setting). The table
    and the container are created on first use. Close it (or use ``async with``) to release its clients."""

    def __init__(self, connection_string: str | None = None, *, table: str = DEFAULT_NAME,
                 container: str = DEFAULT_NAME, allowed_checkpoint_types: list[str] | None = None) -> None:
        connection = connection_string or os.environ.get("AzureWebJobsStorage") or ""
        if not connection:
            raise ValueError("AzureCheckpointStorage needs a connection string (or the AzureWebJobsStorage setting)")
        self._table = TableClient.from_connection_string(connection, table_name=table)
        self._container = ContainerClient.from_connection_string(connection, container_name=container)
        self._allowed = list(allowed_checkpoint_types or [])
        self._created = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self._table.close()
        await self._container.close()

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        checkpoint_id = _checked(checkpoint.checkpoint_id)
        encoded = await encode_checkpoint(checkpoint, self._allowed)
        await self._ensure_created()
        await self._container.upload_blob(f"{checkpoint_id}.json", json.dumps(encoded), overwrite=True)
        await self._table.upsert_entity({"PartitionKey": checkpoint_id, "RowKey": "",
                                         "workflow_name": checkpoint.workflow_name,
                                         "timestamp": checkpoint.timestamp})
        return checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        try:
            blob = await self._container.download_blob(f"{_checked(checkpoint_id)}.json")
            encoded = json.loads(await blob.readall())
        except ResourceNotFoundError:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}") from None
        return await decode_checkpoint(encoded, self._allowed)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [row["PartitionKey"] for row in await self._rows(workflow_name)]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [await self.load(checkpoint_id) for checkpoint_id in await self.list_checkpoint_ids(
            workflow_name=workflow_name)]

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        rows = await self._rows(workflow_name)
        if not rows:
            return None
        newest = max(rows, key=lambda row: str(row.get("timestamp") or ""))
        return await self.load(str(newest["PartitionKey"]))

    async def delete(self, checkpoint_id: str) -> bool:
        checkpoint_id = _checked(checkpoint_id)
        try:  # delete_entity does not say whether the row was there
            await self._table.get_entity(partition_key=checkpoint_id, row_key="", select=["PartitionKey"])
            found = True
        except ResourceNotFoundError:
            found = False
        await self._table.delete_entity(partition_key=checkpoint_id, row_key="")
        with contextlib.suppress(ResourceNotFoundError):
            await self._container.delete_blob(f"{checkpoint_id}.json")
        return found

    async def _rows(self, workflow_name: str) -> list[dict[str, Any]]:
        await self._ensure_created()
        query = self._table.query_entities("workflow_name eq @name", parameters={"name": workflow_name},
                                           select=["PartitionKey", "timestamp"])
        return [dict(row) async for row in query]

    async def _ensure_created(self) -> None:
        if self._created:
            return
        for create in (self._table.create_table, self._container.create_container):
            with contextlib.suppress(ResourceExistsError):
                await create()
        self._created = True


def _checked(checkpoint_id: str) -> str:
    if not _ID.match(str(checkpoint_id)):
        raise WorkflowCheckpointException(f"Invalid checkpoint ID: {str(checkpoint_id)[:40]!r}")
    return str(checkpoint_id)
