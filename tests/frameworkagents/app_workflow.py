"""The Agent Framework workflow the framework tests plug into the app (``RESILIENT_AGENT=...:build``).

Three supersteps, ``outline`` → ``draft`` → ``publish``, each recording its side effect in
``SIDE_EFFECTS_FILE`` (see ``app_agents.py``). ``publish`` asks a person first (``request_info``) when the
input mentions "approval"; ``draft`` waits ``WORKFLOW_DRAFT_DELAY`` seconds (room to kill a worker
mid-superstep). No ``from __future__ import annotations``: Agent Framework reads the handlers' annotations.
"""

import asyncio
import os
from typing import Any

from agent_framework import Executor, WorkflowBuilder, WorkflowContext, executor, handler, response_handler

from tests.frameworkagents.app_agents import _record


@executor(id="outline")
async def outline(text: str, ctx: WorkflowContext[str]) -> None:
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
        if "approval" in text:
            await ctx.request_info(f"publish {text}?", bool)
            return
        _record("publish")
        await ctx.yield_output("Published.")

    @response_handler
    async def answered(self, question: str, approved: bool, ctx: WorkflowContext[str, str]) -> None:
        if approved:
            _record("publish")
            await ctx.yield_output("Published after approval.")
        else:
            await ctx.yield_output("Not published.")


def build() -> Any:
    publish = Publish(id="publish")
    return (WorkflowBuilder(name="publishing", start_executor=outline)
            .add_edge(outline, draft).add_edge(draft, publish).build())
