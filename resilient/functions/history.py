"""The :class:`~resilient.engine.heal.unstored.HistoryPort` over the Durable client binding."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from resilient.engine.orchestration.terms import FORGET_AFTER_KEY
from resilient.functions.durable_bindings import DurableClient

# A store=false run's instance is never older than its run plus the grace: a day back is plenty.
_SWEEP_WINDOW_DAYS = 1


class ClientHistory:
    def __init__(self, client: DurableClient) -> None:
        self._client = client

    async def runtime_status(self, instance_id: str) -> str | None:
        status = await self._client.get().get_status(instance_id)
        found = status.runtime_status if status else None
        return found.value if found is not None else None

    async def purge(self, instance_id: str) -> None:
        await self._client.get().purge_instance_history(instance_id)

    async def finished_unstored(self, created_before: datetime) -> list[str]:
        from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus

        finished = [OrchestrationRuntimeStatus.Completed, OrchestrationRuntimeStatus.Failed,
                    OrchestrationRuntimeStatus.Terminated]
        statuses = await self._client.get().get_status_by(
            created_time_from=created_before - timedelta(days=_SWEEP_WINDOW_DAYS),
            created_time_to=created_before, runtime_status=finished)
        found: list[str] = []
        for status in statuses:
            given = _as_dict(status.input_)
            if given.get(FORGET_AFTER_KEY) is not None and status.instance_id:
                found.append(str(status.instance_id))
        return found


def _as_dict(value: Any) -> dict[str, Any]:
    """An instance's input as the management API returns it (a JSON value, or JSON text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}
