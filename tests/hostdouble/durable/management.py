"""The management operations behind the Durable HTTP API: start, status, events, terminate, purge,
restart, rewind, list, entity signals and state."""

from __future__ import annotations

import json
import uuid
from typing import Any

from .core import RuntimeCore, trace
from .episode import fresh_state, rewind_event
from .history import (
    ACTIVE,
    EVENT_RAISED,
    EXECUTION_COMPLETED,
    EXECUTION_STARTED,
    EXECUTION_TERMINATED,
    GENERIC_EVENT,
    SUB_ORCHESTRATION_FAILED,
    TASK_FAILED,
    TASK_SCHEDULED,
    iso,
    new_event,
    utcnow,
)
from .messaging import Envelope

INVALID_ID_CHARS = set("/\\#?")


class UnknownFunction(Exception):
    """No orchestrator function of that name (the extension's ``ArgumentException``)."""


class InvalidInstanceId(Exception):
    """An instance id the extension refuses (``@`` first, ``/ \\ # ?``, control characters, > 256)."""


class InstanceConflict(Exception):
    """``start`` over an instance that is Pending/Running/ContinuedAsNew/Suspended (``NonRunningStates``)."""


class NotFailed(Exception):
    """``rewind`` of an instance that is not Failed (the client's ``InvalidOperationException``)."""


def validate_instance_id(instance_id: str) -> None:
    if instance_id.startswith("@"):
        raise InvalidInstanceId("Orchestration instance ids must not start with @.")
    if any(c in INVALID_ID_CHARS or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in instance_id):
        raise InvalidInstanceId("Orchestration instance ids must not contain /, \\, #, ?, or control characters.")
    if len(instance_id) > 256:
        raise InvalidInstanceId("Instance ID lengths must not exceed 256 characters.")


def entity_instance_id(name: str, key: str) -> str:
    return f"@{name.lower()}@{key}"


class Management(RuntimeCore):
    """The operations behind the Durable HTTP API (``DurableClient``, ``HttpApiHandler``)."""

    async def start_new(self, name: str, instance_id: str | None, input_: Any, version: str = "") -> str:
        """``StartNewAsync``: a new execution, unless one is Pending/Running (``NonRunningStates``)."""
        if self.host.orchestrator_function(name) is None:
            raise UnknownFunction(
                f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function. "
                "Additional info: No orchestrator functions are currently registered!")
        instance_id = instance_id or uuid.uuid4().hex
        validate_instance_id(instance_id)
        existing = await self.storage.read_instance(instance_id)
        if existing is not None and existing.get("RuntimeStatus") in ACTIVE:
            raise InstanceConflict(f"An Orchestration instance with the status {existing['RuntimeStatus']} "
                                   "already exists.")
        execution_id = uuid.uuid4().hex
        now = iso(utcnow())
        fields = {"Name": name, "Version": version, "RuntimeStatus": "Pending", "ExecutionId": execution_id,
                  "Input": json.dumps(input_), "Output": "null", "CustomStatus": "null", "CreatedTime": now,
                  "LastUpdatedTime": now, "CompletedTime": "", "TaskHubName": self.names.hub}
        try:
            if existing is None:
                await self.storage.write_instance(instance_id, fields, create=True, replace=True)
            else:
                await self.storage.write_instance(instance_id, fields, etag=existing["etag"], replace=True)
        except Exception as error:  # someone started it in between
            raise InstanceConflict(f"An Orchestration instance with the status Pending already exists. "
                                   f"({type(error).__name__})") from error
        started = new_event(EXECUTION_STARTED, Name=name, Version=version, Input=input_,
                            OrchestrationInstance={"InstanceId": instance_id, "ExecutionId": execution_id})
        started["Timestamp"] = now
        trace("start message sending", instance_id)
        await self._send_to_instance(Envelope(instance_id, started, execution_id))
        trace("start message sent", instance_id)
        return instance_id

    async def status(self, instance_id: str) -> dict[str, Any] | None:
        return await self.storage.read_instance(instance_id)

    async def history(self, instance_id: str) -> list[dict[str, Any]]:
        return (await self.storage.load_history(instance_id)).events

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        """``data`` is the request body parsed once (a JToken on the real host) or ``None``."""
        event = new_event(EVENT_RAISED, Name=name, Input=None if data is None else json.dumps(data))
        await self._send_to_instance(Envelope(instance_id, event))

    async def terminate(self, instance_id: str, reason: str | None) -> None:
        await self._send_to_instance(Envelope(instance_id, new_event(EXECUTION_TERMINATED, Input=reason)))

    async def purge(self, instance_id: str) -> bool:
        row = await self.storage.read_instance(instance_id)
        if row is None:
            return False
        await self.storage.delete_history(instance_id)
        await self.storage.delete_instance(instance_id)
        await self.storage.delete_large_blobs(instance_id)
        session = self.sessions.get(instance_id)
        if session is not None and session.task is None:
            del self.sessions[instance_id]
        elif session is not None:
            session.history = None
        return True

    async def restart(self, instance_id: str, new_instance_id: bool) -> str:
        """``RestartAsync``: the original input again, under a new id or the same one."""
        row = await self.storage.read_instance(instance_id)
        if row is None:
            raise KeyError(instance_id)
        input_ = json.loads(row.get("Input") or "null")
        return await self.start_new(str(row.get("Name")), None if new_instance_id else instance_id, input_,
                                str(row.get("Version") or ""))

    async def rewind(self, instance_id: str, reason: str | None) -> None:
        """``RewindHistoryAsync`` + a GenericEvent: failures of the last execution are cleared from the
        history (each TaskFailed and its TaskScheduled become GenericEvents, so the task runs again), the
        status goes back to Pending, and the instance replays. Failed sub-orchestrations are not rewound."""
        row = await self.storage.read_instance(instance_id)
        if row is None:
            raise KeyError(instance_id)
        if row.get("RuntimeStatus") != "Failed":
            raise NotFailed("The rewind operation is only supported on failed orchestration instances.")
        loaded = await self.storage.load_history(instance_id)
        count = len(loaded.events)
        keys = sorted(r["RowKey"] for r in await self.storage.history_rows(instance_id)
                      if r["RowKey"] != "sentinel" and int(r["RowKey"], 16) < count
                      and r.get("ExecutionId") == loaded.execution_id)
        events = dict(zip(keys, loaded.events, strict=True))
        failed_tasks = {int(e["TaskScheduledId"]) for e in events.values() if e["EventType"] == TASK_FAILED}
        updates = []
        for row_key, event in events.items():
            kind = event["EventType"]
            if kind in (TASK_FAILED, SUB_ORCHESTRATION_FAILED) or (
                    kind == EXECUTION_COMPLETED and event.get("OrchestrationStatus") == "Failed") or (
                    kind == TASK_SCHEDULED and int(event.get("EventId", -1)) in failed_tasks):
                updates.append((row_key, rewind_event(event)))
        await self.storage.rewrite_history_rows(instance_id, updates)
        state = dict(loaded.state or fresh_state())
        state["rewound"] = sorted(set(state.get("rewound", [])) | failed_tasks)
        await self.storage.commit_history(instance_id, str(loaded.execution_id), count, [], {}, loaded.etag, state)
        await self.storage.write_instance(instance_id, {"RuntimeStatus": "Pending", "Output": "null",
                                                        "CompletedTime": "", "LastUpdatedTime": iso(utcnow())})
        session = self.sessions.get(instance_id)
        if session is not None:
            session.history = None
        await self._send_to_instance(Envelope(instance_id, new_event(GENERIC_EVENT, Data=reason or "")))

    async def list_instances(self, statuses: set[str], prefix: str) -> list[dict[str, Any]]:
        return await self.storage.query_instances(statuses=statuses or None, prefix=prefix)

    async def signal_entity(self, name: str, key: str, operation: str, input_: str | None) -> None:
        """``input_`` is the operation input as the SDK wants it in the batch (a JSON string of JSON)."""
        request = {"id": str(uuid.uuid4()), "op": operation, "signal": True, "input": input_,
                   "parent": None, "parentExecution": None}
        event = new_event(EVENT_RAISED, Name="op", Input=json.dumps(request))
        await self._send_to_instance(Envelope(entity_instance_id(name, key), event))

    async def read_entity(self, name: str, key: str) -> dict[str, Any] | None:
        row = await self.storage.read_instance(entity_instance_id(name, key))
        if row is None or not row.get("EntityExists"):
            return None
        return row
