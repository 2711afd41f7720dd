"""Which agent the app runs: the app setting ``RESILIENT_AGENT="module:callable"``, or the offline sample.

The callable takes no arguments or the app's :class:`~resilient.settings.Settings` and returns one of:

* an agent written to this service's phase API (:class:`resilient.agents.base.Agent`: ``plan`` and
  ``run_phase``), run as it is (built once per worker and shared by its responses);
* an Agent Framework agent (``agent_framework.Agent``, or another agent whose ``run`` takes per-run
  middleware), run step by step (:mod:`resilient.agents.framework.agent`), built once per worker and shared
  (it keeps no per-run state: each run's conversation travels in the step's state);
* an Agent Framework ``Workflow``, or a ``WorkflowAgent`` (``workflow.as_agent()``), run superstep by
  superstep (:mod:`resilient.agents.framework.workflow`). A workflow keeps its run's state, so the callable
  is called again for every step and must build a new one each time.

Refused, with a sentence saying why and what to return instead (:mod:`resilient.agents.kinds`): a functional
``@workflow``, and an agent whose ``run`` takes no middleware (it cannot be stepped).

The module is imported like any app module (the app's folder or ``PYTHONPATH``). Agent Framework itself is
imported only when the configured agent is one of its types, so the default app starts without it.

A setting that cannot be honoured (no such module, no such callable, a callable that raises or returns
something else) raises :class:`AgentLoadError` with one sentence saying which and how to fix it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
from collections.abc import Callable
from typing import Any

from resilient.agents import kinds
from resilient.agents.base import Agent
from resilient.agents.kinds import AgentLoadError
from resilient.settings import Settings

log = logging.getLogger("resilient.agents")

SETTING = "RESILIENT_AGENT"


def configured_agent(settings: Settings) -> Agent:
    """The agent factory ``function_app.py`` registers: the configured agent, or the offline sample."""
    spec = (os.environ.get(SETTING) or "").strip()
    if not spec:
        from resilient.agents.research import ResearchAgent

        return ResearchAgent(settings)
    try:
        return load_agent(spec, settings)
    except AgentLoadError as error:
        _report(str(error))
        raise


@functools.cache
def _report(message: str) -> None:
    """One log line per process for a setting that cannot be honoured (every request would repeat it)."""
    log.error("%s", message)


def load_agent(spec: str, settings: Settings) -> Agent:
    """Import ``module:callable``, call it once to see what it builds, and wrap that (module docstring)."""
    factory = _factory(spec)
    attribute = spec.partition(":")[2]

    def build() -> Any:
        try:
            built = factory(settings) if _takes_one_argument(factory) else factory()
        except Exception as error:
            raise AgentLoadError(f"{SETTING}={spec!r}: {attribute}() raised {type(error).__name__}: {error}") from error
        if inspect.isawaitable(built):
            close = getattr(built, "close", None)
            if callable(close):
                close()  # the coroutine is never awaited: say so instead of a RuntimeWarning
            raise AgentLoadError(f"{SETTING}={spec!r}: {attribute!r} is async; it must return the agent directly.")
        return built

    return wrap_agent(build(), spec, rebuild=build)


def _factory(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AgentLoadError(f"{SETTING}={spec!r} must have the form 'module:callable' (e.g. 'my_agent:build').")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise AgentLoadError(f"{SETTING}={spec!r}: module {module_name!r} could not be imported ({error}). "
                             f"Put it in the app's folder or on PYTHONPATH.") from error
    factory: Any = module
    for part in attribute.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise AgentLoadError(f"{SETTING}={spec!r}: module {module_name!r} has no {attribute!r}.")
    if not callable(factory):
        raise AgentLoadError(f"{SETTING}={spec!r}: {attribute!r} is not callable; it should be a function or "
                             f"class that returns the agent.")
    return factory


def wrap_agent(built: Any, spec: str = "the agent", rebuild: Callable[[], Any] | None = None) -> Agent:
    """Run ``built`` as this service's agent, whatever kind it is (see the module docstring). ``rebuild``
    makes a new one (the app's factory); a workflow is built anew for every step with it."""
    if callable(getattr(built, "plan", None)) and callable(getattr(built, "run_phase", None)):
        agent: Agent = built
        return agent
    kind = kinds.classify(built)
    if kind is kinds.Kind.REFUSED:
        raise AgentLoadError(f"{SETTING}: {spec} returned {kinds.refusal(built)}")
    if kind in (kinds.Kind.WORKFLOW, kinds.Kind.WORKFLOW_AGENT):
        from resilient.agents.framework.workflow import FrameworkWorkflow

        return FrameworkWorkflow(kinds.workflow_builder(built, kind, rebuild, spec))
    if kind is kinds.Kind.AGENT:
        from resilient.agents.framework.agent import FrameworkAgent

        return FrameworkAgent(built)  # refuses, with the reason, an agent it cannot step
    raise AgentLoadError(f"{SETTING}: {spec} returned {type(built).__name__}, which is neither an Agent Framework "
                         f"agent or workflow nor an agent with plan() and run_phase().")


def _takes_one_argument(factory: Any) -> bool:
    try:
        parameters = [p for p in inspect.signature(factory).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    except (TypeError, ValueError):
        return False
    return len(parameters) == 1
