"""The Agent Framework workflows the framework tests plug into the app (``RESILIENT_AGENT=...:build`` etc.).

``build``: three supersteps, ``outline`` → ``draft`` → ``publish``, each recording its side effect in
``SIDE_EFFECTS_FILE`` (see ``app_agents.py``); ``outline`` fails when the input says "explode".
``publish`` asks first (``request_info``) when the input says so: "title" asks for a ``str``,
"approval" sends a :class:`PublishRequest` and wants a :class:`Decision`, "both" asks both in one
superstep. ``draft`` waits ``WORKFLOW_DRAFT_DELAY`` seconds (room to kill a worker mid-superstep), and
the decision's handler ``WORKFLOW_DECIDE_DELAY`` seconds (after recording "deciding").
``build_as_agent``: the same as a ``WorkflowAgent``. ``build_with_agents``: two agent executors that
each call the fake model once. ``build_shared`` returns one workflow object every time (refused at its
second step). No ``from __future__ import annotations``: Agent Framework reads the handlers' annotations.
"""

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from agent_framework import (
    Agent,
    AgentExecutor,
    Executor,
    Message,
    WorkflowBuilder,
    WorkflowContext,
    executor,
    handler,
    register_checkpoint_type,
    response_handler,
)

from tests.frameworkagents.app_agents import _client, _record


@dataclass
class PublishRequest:
    draft: str
    words: int


@dataclass
class Decision:
    approved: bool
    note: str = ""


register_checkpoint_type(PublishRequest)  # pending requests are in the checkpoint: let it decode them
register_checkpoint_type(Decision)


@executor(id="outline")
async def outline(text: str, ctx: WorkflowContext[str]) -> None:
    if "explode" in text:
        raise RuntimeError("the outline exploded")
    _record("outline", text=text)
    await ctx.send_message(f"outline of {text}")


@executor(id="draft")
async def draft(text: str, ctx: WorkflowContext[str, str]) -> None:
    await asyncio.sleep(float(os.environ.get("WORKFLOW_DRAFT_DELAY", "0") or 0))
    _record("draft")
    await ctx.yield_output(f"Drafted from the {text}. ")
    await ctx.send_message(text)


class Publish(Executor):
    @handler
    async def publish(self, text: str, ctx: WorkflowContext[str, str]) -> None:
        asked = False
        if "title" in text or "both" in text:
            await ctx.request_info(f"Title for {text}?", str)
            asked = True
        if "approval" in text or "both" in text:
            await ctx.request_info(PublishRequest(draft=text, words=len(text.split())), Decision)
            asked = True
        if not asked:
            _record("publish")
            await ctx.yield_output("Published.")

    @response_handler
    async def titled(self, question: str, title: str, ctx: WorkflowContext[str, str]) -> None:
        _record("publish", title=title)
        await ctx.yield_output(f"Published as {title!r}. ")

    @response_handler
    async def decided(self, request: PublishRequest, decision: Decision, ctx: WorkflowContext[str, str]) -> None:
        _record("deciding")
        await asyncio.sleep(float(os.environ.get("WORKFLOW_DECIDE_DELAY", "0") or 0))
        if decision.approved:
            _record("publish", note=decision.note)
            await ctx.yield_output(f"Published after approval ({decision.note}) of {request.words} words. ")
        else:
            await ctx.yield_output("Not published. ")


def build() -> Any:
    return (WorkflowBuilder(name="publishing", start_executor=outline)
            .add_edge(outline, draft).add_edge(draft, Publish(id="publish")).build())


@executor(id="topic")
async def topic(messages: list[Message], ctx: WorkflowContext[str]) -> None:
    await ctx.send_message(messages[-1].text if messages else "")


def build_as_agent() -> Any:
    """A ``WorkflowAgent``: its start executor takes messages, then the publishing supersteps."""
    return (WorkflowBuilder(name="publishing-agent", start_executor=topic)
            .add_edge(topic, outline).add_edge(outline, draft).add_edge(draft, Publish(id="publish"))
            .build().as_agent(name="publisher"))


@executor(id="ask_both")
async def ask_both(text: str, ctx: WorkflowContext[str]) -> None:
    await ctx.send_message(text)


@executor(id="archive")
async def archive(text: str, ctx: WorkflowContext[str]) -> None:
    await asyncio.sleep(float(os.environ.get("WORKFLOW_ARCHIVE_DELAY", "0") or 0))
    _record("archive")


def build_with_agents() -> Any:
    """Two agent executors fed the same input; the fake model answers "thanks" with text (one call each). In
    the same superstep ``archive`` waits ``WORKFLOW_ARCHIVE_DELAY`` seconds (room to kill the worker after
    the model calls, before the superstep's checkpoint)."""
    writer = AgentExecutor(Agent(client=_client(), name="writer", instructions="Write."), id="writer")
    editor = AgentExecutor(Agent(client=_client(), name="editor", instructions="Edit."), id="editor")
    return (WorkflowBuilder(name="agents", start_executor=ask_both)
            .add_fan_out_edges(ask_both, [writer, editor, archive]).build())


_SHARED: list[Any] = []


def build_shared() -> Any:
    """Wrong on purpose: the same workflow object on every call."""
    if not _SHARED:
        _SHARED.append(build())
    return _SHARED[0]
