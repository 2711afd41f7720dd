"""What kind of Agent Framework object ``RESILIENT_AGENT``'s factory returned, and why some are refused.

Recognised by class name along the MRO (``agent_framework`` classes), so this module needs no Agent
Framework import: the default app starts without it.

* ``Workflow``: stepped by superstep, a new workflow built with the factory for every step.
* ``WorkflowAgent`` (``workflow.as_agent()``): run as its workflow, the same way (a new agent from the factory
  each step, and its workflow).
* An agent with ``run`` (``agent_framework.Agent`` and other ``SupportsAgentRun``): stepped by model call when
  the service can put its middleware around ``run``; otherwise refused, with the reason
  (:func:`resilient.agents.framework.agent.not_steppable`).
* A functional workflow (``@workflow``) and its ``.as_agent()``: refused (:func:`refusal`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

FUNCTIONAL = ("FunctionalWorkflow", "FunctionalWorkflowDefinition", "FunctionalWorkflowAgent")


class AgentLoadError(RuntimeError):
    """``RESILIENT_AGENT`` names something this service cannot run (raised by the loader, and by an adapter
    that finds the agent it was given cannot be stepped)."""


class Kind(enum.Enum):
    WORKFLOW = "workflow"
    WORKFLOW_AGENT = "workflow agent"
    AGENT = "agent"
    REFUSED = "refused"
    UNKNOWN = "unknown"


def _framework_classes(built: Any) -> set[str]:
    return {cls.__name__ for cls in type(built).__mro__ if cls.__module__.startswith("agent_framework")}


def classify(built: Any) -> Kind:
    names = _framework_classes(built)
    if names & set(FUNCTIONAL):
        return Kind.REFUSED
    if "WorkflowAgent" in names:
        return Kind.WORKFLOW_AGENT
    if "Workflow" in names:
        return Kind.WORKFLOW
    if callable(getattr(built, "run", None)):
        return Kind.AGENT
    return Kind.UNKNOWN


def refusal(built: Any) -> str:
    """Why a functional workflow is not hosted, and what to return instead."""
    return (f"a functional workflow ({type(built).__name__}, from @workflow), which this service does not host: it "
            "checkpoints a workflow at its supersteps, and a functional workflow is one Python function without "
            "them (run as one step, a crash would repeat all of it). Build the workflow with WorkflowBuilder "
            "(executors and edges) and return the Workflow, or its .as_agent().")


def workflow_builder(built: Any, kind: Kind, rebuild: Callable[[], Any] | None, spec: str) -> Callable[[], Any]:
    """A function that makes a new ``Workflow`` per call: the factory's workflow, or its new agent's. The
    object ``built`` (what start-up's call returned) is used for the first step only."""
    first: list[Any] = [built]

    def build() -> Any:
        made = first.pop() if first else (rebuild() if rebuild is not None else built)
        if classify(made) is not kind:
            raise TypeError(f"{spec} returned a {kind.value} at start-up but {type(made).__name__} now; it must "
                            "return the same kind of object every time.")
        return made.workflow if kind is Kind.WORKFLOW_AGENT else made

    return build
