"""A functional ``@workflow`` (Agent Framework, experimental), which ``RESILIENT_AGENT`` refuses at start-up."""

from typing import Any

from agent_framework import workflow


@workflow
async def functional_pipeline(text: str) -> str:
    return text.upper()


def build() -> Any:
    return functional_pipeline
