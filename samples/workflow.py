"""An Agent Framework workflow, hosted superstep by superstep: ``RESILIENT_AGENT=samples.workflow:build``.

``outline`` → ``draft`` → ``review``. Each superstep is a step of the response: checkpointed when it ends,
so a worker kill or a whole-host restart resumes the workflow from the last finished superstep. ``review``
asks a person (``request_info``, a ``bool`` answer) before it publishes; the response ends with a
``function_call`` item named ``request_info`` whose arguments carry the question, and the next turn's
``function_call_output`` (output ``true`` or ``false``) answers it. The factory builds a new workflow on
every call: the service calls it for every step. No model needed.

No ``from __future__ import annotations`` here: Agent Framework reads the handlers' type annotations.
"""

from agent_framework import Executor, WorkflowBuilder, WorkflowContext, executor, handler, response_handler


@executor(id="outline")
async def outline(topic: str, ctx: WorkflowContext[str]) -> None:
    await ctx.send_message(f"three points about {topic}")


@executor(id="draft")
async def draft(points: str, ctx: WorkflowContext[str, str]) -> None:
    await ctx.yield_output(f"Draft: {points}. ")
    await ctx.send_message(points)


class Review(Executor):
    @handler
    async def review(self, points: str, ctx: WorkflowContext[str, str]) -> None:
        await ctx.request_info(f"Publish the draft on {points}?", bool)

    @response_handler
    async def decided(self, question: str, approved: bool, ctx: WorkflowContext[str, str]) -> None:
        await ctx.yield_output("Published." if approved else "Kept as a draft.")


def build() -> object:
    review = Review(id="review")
    return (WorkflowBuilder(name="writing", start_executor=outline)
            .add_edge(outline, draft).add_edge(draft, review).build())
