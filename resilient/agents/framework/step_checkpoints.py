"""The checkpoint storage one workflow step runs with, and how its checkpoint becomes the step's JSON state.

Why Agent Framework's ``FileCheckpointStorage`` underneath: it is the framework's public storage, and it
encodes a checkpoint (JSON, with values JSON cannot express pickled) and decodes it with a restricted
unpickler that only builds allowed types: Python's value types, Agent Framework's and the OpenAI SDK's
own types, and the application types registered with ``agent_framework.register_checkpoint_type`` (or
named in ``allowed_checkpoint_types``). It also refuses to *save* a checkpoint it could not load again, so a
workflow holding an unregistered type fails at the superstep that stored it, with the framework's message,
not later on another worker.

A step's storage lives in a temporary folder for the step's lifetime. The step starts from the checkpoint
the previous step kept (written into the folder); the newest checkpoint the workflow saves is the one the
step keeps: :meth:`StepCheckpointStorage.encoded` reads it back as the JSON Agent Framework wrote, and the
engine stores that with the step (Table storage, spilled to a blob when large).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agent_framework import FileCheckpointStorage, WorkflowCheckpoint, WorkflowCheckpointException


class StepCheckpointStorage:
    """Agent Framework's ``CheckpointStorage`` for one step (see the module docstring). Close it when the
    step ends (:meth:`close`): its folder is removed."""

    def __init__(self, allowed_checkpoint_types: list[str] | None = None) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="resilient-step-"))
        self._files = FileCheckpointStorage(self._folder, allowed_checkpoint_types=allowed_checkpoint_types)
        self.latest_id: str | None = None
        self.saved = 0
        # Agent Framework logs a failed save and runs on; the step must not: its state would be stale.
        self.failure: WorkflowCheckpointException | None = None

    async def restore(self, encoded: dict[str, Any]) -> str:
        """Put the checkpoint a previous step kept into this storage; returns its id. A checkpoint that does
        not decode under the allowed types raises Agent Framework's ``WorkflowCheckpointException``."""
        checkpoint_id = str(encoded.get("checkpoint_id") or "")
        self._path(checkpoint_id).write_text(json.dumps(encoded), encoding="utf-8")
        await self._files.load(checkpoint_id)  # decodes it now: a bad checkpoint fails before the run starts
        self.latest_id = checkpoint_id
        return checkpoint_id

    def encoded(self) -> dict[str, Any] | None:
        """The newest checkpoint as Agent Framework encoded it (JSON), or None when there is none."""
        if self.latest_id is None:
            return None
        found: dict[str, Any] = json.loads(self._path(self.latest_id).read_text(encoding="utf-8"))
        return found

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def _path(self, checkpoint_id: str) -> Path:
        path = (self._folder / f"{checkpoint_id}.json").resolve()
        if not checkpoint_id or path.parent != self._folder.resolve():
            raise ValueError(f"not a checkpoint id: {checkpoint_id[:40]!r}")
        return path

    # Agent Framework's CheckpointStorage protocol -------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        try:
            saved = await self._files.save(checkpoint)
        except WorkflowCheckpointException as error:
            self.failure = self.failure or error
            raise
        self.latest_id = saved
        self.saved += 1
        return saved

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return await self._files.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self._files.list_checkpoints(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        return await self._files.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self._files.get_latest(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self._files.list_checkpoint_ids(workflow_name=workflow_name)


async def encode_checkpoint(checkpoint: WorkflowCheckpoint, allowed_checkpoint_types: list[str] | None = None
                            ) -> dict[str, Any]:
    """``checkpoint`` as Agent Framework's storage encodes it (JSON); refused when it would not decode under
    the allowed types."""
    storage = StepCheckpointStorage(allowed_checkpoint_types)
    try:
        await storage.save(checkpoint)
        encoded = storage.encoded()
        assert encoded is not None
        return encoded
    finally:
        storage.close()


async def decode_checkpoint(encoded: dict[str, Any], allowed_checkpoint_types: list[str] | None = None
                            ) -> WorkflowCheckpoint:
    """The checkpoint ``encoded`` holds, built only from allowed types."""
    storage = StepCheckpointStorage(allowed_checkpoint_types)
    try:
        return await storage.load(await storage.restore(encoded))
    finally:
        storage.close()
