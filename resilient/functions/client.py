"""The Durable client binding behind the app's small ports (:class:`~resilient.http.service.DurableRuntime`,
:class:`~resilient.engine.heal.repair.DurableControl`), and the repairer built over it."""

from __future__ import annotations

from typing import Any

from resilient.engine.activities import Engine
from resilient.engine.heal.repair import Repairer, RepairPolicy
from resilient.engine.orchestration.terms import ORCHESTRATOR
from resilient.functions.durable_bindings import DurableClient


class ClientRuntime:
    """Start, status, events and entity signals through ``df.DurableOrchestrationClient``, built (and the
    SDK imported) at the first of them."""

    def __init__(self, client: DurableClient) -> None:
        self._client = client

    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        """Also over a Completed/Failed/Terminated instance: the extension's default
        ``OverridableExistingInstanceStates`` starts a new execution there and refuses a running one."""
        await self._client.get().start_new(ORCHESTRATOR, instance_id=instance_id, client_input=payload)

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        await self._client.get().raise_event(instance_id, name, data)

    async def status(self, instance_id: str) -> str | None:
        try:
            found = await self._client.get().get_status(instance_id, show_input=False)
        except TypeError:
            # The host answers an unknown instance with an empty 404 body, which azure-functions-durable 1.7
            # cannot parse (``DurableOrchestrationStatus.from_json(None)``): the instance does not exist.
            return None
        runtime_status = getattr(found, "runtime_status", None)
        if not found or runtime_status is None:
            return None  # a 404 with a message body parses into an empty status
        return str(getattr(runtime_status, "value", runtime_status))

    async def signal_entity(self, entity_name: str, key: str, operation: str, payload: Any) -> None:
        from azure.durable_functions import EntityId

        await self._client.get().signal_entity(EntityId(entity_name, key), operation, payload)


def repairer(client: DurableClient, engine: Engine) -> Repairer:
    """The repair path for this worker: storage and finalize from the engine, Durable from the binding."""
    settings = engine.settings
    policy = RepairPolicy(missing_grace_seconds=settings.repair_grace_seconds,
                          check_interval_seconds=settings.repair_check_seconds)
    return Repairer(engine.storage, ClientRuntime(client), engine.finalize, policy,
                    throttle=engine.worker.repair_checks)
