"""Durable Functions triggers and the client binding, declared without importing the Durable SDK.

Why: every new worker imports ``function_app`` to index it before it can serve anything, and indexing
needs only each function's binding metadata. ``azure.durable_functions`` (with the ``aiohttp`` client it
imports) was about 0.4 s of that import. These decorators emit the same metadata as the SDK's
``df.Blueprint`` (``tests/unit/test_durable_bindings.py`` compares them binding by binding) and load the
SDK when it is first needed: the first orchestrator or entity episode, or the first call through a
Durable client (starting a run; an HTTP read that needs no Durable call never loads it).

No ``from __future__ import annotations`` here on purpose: the worker type-checks trigger parameters
from the real annotation objects of the handles built below.
"""

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

import azure.functions as func
from azure.functions.decorators.core import InputBinding, Trigger

from resilient.functions import durable_timestamps

if TYPE_CHECKING:
    import azure.durable_functions as df

F = TypeVar("F", bound=Callable[..., Any])

# Binding names, as ``azure.durable_functions.constants`` spells them (the host's Durable extension reads
# these from the function metadata).
ORCHESTRATION_TRIGGER = "orchestrationTrigger"
ACTIVITY_TRIGGER = "activityTrigger"
ENTITY_TRIGGER = "entityTrigger"
DURABLE_CLIENT = "durableClient"


class OrchestrationTrigger(Trigger):
    """Same fields as the SDK's ``decorators.metadata.OrchestrationTrigger``."""

    @staticmethod
    def get_binding_name() -> str:
        return ORCHESTRATION_TRIGGER

    def __init__(self, name: str, orchestration: str | None = None) -> None:
        self.orchestration = orchestration
        super().__init__(name=name)


class ActivityTrigger(Trigger):
    """Same fields as the SDK's ``decorators.metadata.ActivityTrigger``."""

    @staticmethod
    def get_binding_name() -> str:
        return ACTIVITY_TRIGGER

    def __init__(self, name: str, activity: str | None = None) -> None:
        self.activity = activity
        super().__init__(name=name)


class EntityTrigger(Trigger):
    """Same fields as the SDK's ``decorators.metadata.EntityTrigger``."""

    @staticmethod
    def get_binding_name() -> str:
        return ENTITY_TRIGGER

    def __init__(self, name: str, entity_name: str | None = None) -> None:
        self.entity_name = entity_name
        super().__init__(name=name)


class DurableClientBinding(InputBinding):
    """Same fields as the SDK's ``decorators.metadata.DurableClient``."""

    @staticmethod
    def get_binding_name() -> str:
        return DURABLE_CLIENT

    def __init__(self, name: str, task_hub: str | None = None,
                 connection_name: str | None = None) -> None:
        self.task_hub = task_hub
        self.connection_name = connection_name
        super().__init__(name=name)


class DurableClient:
    """The ``durableClient`` binding (a JSON string from the host) made into the SDK client on first use.

    Building ``df.DurableOrchestrationClient`` imports the SDK; most reads never need it."""

    def __init__(self, binding: str) -> None:
        self._binding = binding
        self._client: df.DurableOrchestrationClient | None = None

    def get(self) -> "df.DurableOrchestrationClient":
        if self._client is None:
            from azure.durable_functions import DurableOrchestrationClient

            durable_timestamps.install()
            self._client = DurableOrchestrationClient(self._binding)
        return self._client


def orchestrator_handle(fn: Callable[[Any], Generator[Any, Any, Any]]) -> Callable[[func.OrchestrationContext], str]:
    """What ``df.Orchestrator.create(fn)`` returns, with the SDK imported at the first episode."""
    built: list[Callable[[Any], str]] = []

    def handle(context: func.OrchestrationContext) -> str:
        if not built:
            from azure.durable_functions.orchestrator import Orchestrator

            durable_timestamps.install()
            built.append(Orchestrator.create(fn))
        return built[0](context)

    handle.__name__ = fn.__name__
    handle.orchestrator_function = fn  # type: ignore[attr-defined]  # as the SDK's handle carries it
    return handle


def entity_handle(fn: Callable[[Any], None]) -> Callable[[func.EntityContext], str]:
    """What ``df.Entity.create(fn)`` returns, with the SDK imported at the first batch."""
    built: list[Callable[[Any], str]] = []

    def handle(context: func.EntityContext) -> str:
        if not built:
            from azure.durable_functions.entity import Entity

            built.append(Entity.create(fn))
        return built[0](context)

    handle.__name__ = fn.__name__
    handle.entity_function = fn  # type: ignore[attr-defined]
    return handle


class DurableBlueprint(func.Blueprint):
    """``func.Blueprint`` plus the Durable decorators, without the Durable SDK at import.

    Functions taking a Durable client declare the parameter as ``str`` (the binding's JSON, which is what
    the worker passes) and wrap it in :class:`DurableClient`. HTTP functions take their auth level from the
    app they are registered in (a blueprint's own level is not used by ``azure-functions``)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def _adding(self, add: Callable[[Any], None]) -> Callable[[Any], Any]:
        """A decorator that applies ``add`` to the function's builder (one trigger or binding), as every
        ``azure-functions`` decorator does through ``_configure_function_builder``."""

        @self._configure_function_builder  # type: ignore[untyped-decorator]
        def wrap(fb: Any) -> Any:
            add(fb)
            return fb

        return wrap  # type: ignore[no-any-return]

    def orchestration_trigger(self, context_name: str, orchestration: str | None = None) -> Callable[[F], Any]:
        register = self._adding(lambda fb: fb.add_trigger(
            trigger=OrchestrationTrigger(name=context_name, orchestration=orchestration)))
        return lambda fn: register(orchestrator_handle(fn))

    def activity_trigger(self, input_name: str, activity: str | None = None) -> Callable[[F], Any]:
        return self._adding(lambda fb: fb.add_trigger(trigger=ActivityTrigger(name=input_name, activity=activity)))

    def entity_trigger(self, context_name: str, entity_name: str | None = None) -> Callable[[F], Any]:
        register = self._adding(lambda fb: fb.add_trigger(
            trigger=EntityTrigger(name=context_name, entity_name=entity_name)))
        return lambda fn: register(entity_handle(fn))

    def durable_client_input(self, client_name: str, task_hub: str | None = None,
                             connection_name: str | None = None) -> Callable[[F], Any]:
        return self._adding(lambda fb: fb.add_binding(
            binding=DurableClientBinding(name=client_name, task_hub=task_hub, connection_name=connection_name)))
