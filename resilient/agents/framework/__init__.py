"""Agent Framework agents and workflows hosted by this service (imported only when one is configured)."""

from resilient.agents.framework.agent import idempotency_key

__all__ = ["idempotency_key"]
