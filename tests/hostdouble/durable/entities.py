"""Entity batches: every pending operation at once, committed on the entity's row with its ETag."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ..failures import Answered, HostStopping, Outcome, TimedOut, WorkerExited
from .core import RuntimeCore, Session, trace
from .history import EVENT_RAISED, iso, new_event, utcnow
from .messaging import Delivery, Envelope

MAX_PROCESSED_REQUESTS = 500  # entity request ids remembered to drop re-delivered operations


class Entities(RuntimeCore):
    """Entity batches: every pending operation at once, committed on the entity's row with its ETag."""

    async def _entity_batch(self, session: Session, batch: list[Delivery]) -> None:
        instance_id = session.instance_id
        trace("entity batch", instance_id)
        if session.entity is None:
            row = await self.storage.read_instance(instance_id)
            session.entity = {
                "exists": bool(row and row.get("EntityExists")),
                "state": (row.get("EntityState") or None) if row else None,
                "processed": json.loads(row.get("ProcessedRequests") or "[]") if row else [],
                "etag": row["etag"] if row else None,
            }
        entity = session.entity
        ops: list[tuple[Delivery, dict[str, Any]]] = []
        drops: list[Delivery] = []
        for delivery in batch:
            event = delivery.envelope.event
            if event.get("EventType") != EVENT_RAISED or event.get("Name") != "op":
                drops.append(delivery)
                continue
            request = json.loads(event["Input"])
            if request["id"] in entity["processed"] or any(r["id"] == request["id"] for _, r in ops):
                drops.append(delivery)  # a re-delivered operation that was already committed
                continue
            ops.append((delivery, request))
        if not ops:
            await self._finish(session, drops)
            return
        _, name, key = instance_id.split("@", 2)
        context = {"self": {"name": name, "key": key}, "exists": entity["exists"], "state": entity["state"],
                   "batch": [{"name": r["op"], "input": "null" if r.get("input") is None else r["input"]}
                             for _, r in ops]}
        function = self.host.entity_function(name)
        self.counters.entity_batches += 1
        if function is None:
            outcome: Outcome = Answered({"ok": False, "error": f"The function '{name}' doesn't exist, is disabled, "
                                         "or is not an entity function."})
        else:
            outcome = await self.host.invoke_entity(function, instance_id, json.dumps(context))
        if isinstance(outcome, WorkerExited | HostStopping):
            # EntityMiddleware: internal error → SessionAbortedException: nothing committed, batch retried.
            self.counters.entity_batches_aborted += 1
            why = outcome.message if isinstance(outcome, WorkerExited) else "the host is stopping"
            self.log(f"entity {instance_id}: batch of {len(ops)} aborted ({why}); retried after the back-off")
            await self._finish(session, drops)
            await self._abandon(session, [d for d, _ in ops])
            return
        exists, state = entity["exists"], entity["state"]
        if isinstance(outcome, TimedOut):  # TaskEntityShim: every operation fails with the timeout message
            results = [{"isError": True, "result": json.dumps(outcome.message)} for _ in ops]
        elif outcome.body.get("ok"):
            answer = json.loads(outcome.body["result"])
            exists = bool(answer.get("entityExists"))
            state = answer.get("entityState") if exists else None
            results = answer.get("results", [])
        else:
            failure = json.dumps(str(outcome.body.get("error")))
            results = [{"isError": True, "result": failure} for _ in ops]
        sends = []
        for (_, request), result in zip(ops, results, strict=False):
            if request.get("signal") or not request.get("parent"):
                continue
            message: dict[str, Any] = {"result": result.get("result")}
            if result.get("isError"):
                message["exceptionType"] = "System.Exception"
            reply = new_event(EVENT_RAISED, Name=request["id"], Input=json.dumps(message))
            sends.append(Envelope(request["parent"], reply, request.get("parentExecution")))
        await asyncio.gather(*(self._send_to_instance(e) for e in sends))
        processed = (entity["processed"] + [r["id"] for _, r in ops])[-MAX_PROCESSED_REQUESTS:]
        fields = {"Name": f"@{name}", "RuntimeStatus": "Running", "EntityExists": exists,
                  "EntityState": state if state is not None else "", "ProcessedRequests": json.dumps(processed),
                  "LastUpdatedTime": iso(utcnow()), "TaskHubName": self.names.hub}
        try:
            etag = await self.storage.write_instance(instance_id, fields, etag=entity["etag"],
                                                     create=entity["etag"] is None, replace=True)
        except Exception as error:  # another writer (412/409): drop the cache, retry the batch later
            self.counters.history_conflicts += 1
            self.log(f"entity {instance_id}: state changed under us ({type(error).__name__}); batch retried")
            session.entity = None
            await self._finish(session, drops)
            await self._abandon(session, [d for d, _ in ops])
            return
        session.entity = {"exists": exists, "state": state, "processed": processed, "etag": etag}
        await self._finish(session, [d for d, _ in ops] + drops)
