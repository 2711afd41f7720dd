"""The agent's ``AgentSession``, kept with each step's state and across turns.

Agent Framework keeps what outlives one ``run`` in an ``AgentSession``: its context providers' state
(``session.state``) and a service-side session id (``service_session_id``). Every step of this service is a
``run`` of its own, possibly on another worker, so the session goes into the step's state with Agent
Framework's own serialisation (``to_dict`` / ``from_dict``) and the next step, or the chain's next turn,
runs with it restored.

The conversation itself is kept by this service (the messages in the step's state), not by a history
provider in the session: a step that ends at its next model call never reaches the providers' ``after_run``,
where a history provider would store it. So an agent without a history provider of its own gets
:class:`ConversationKeptByService`, a history provider that loads and stores nothing. Without it, Agent
Framework would add its in-memory history provider to any run given a session, and the model would see the
conversation twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_framework import AgentSession, HistoryProvider, Message

SESSION_KEY = "session"  # in a step's state: the session, as AgentSession.to_dict() gives it


class ConversationKeptByService(HistoryProvider):
    """A history provider that loads and stores nothing: the service passes the conversation itself."""

    SOURCE_ID = "resilient_conversation"

    def __init__(self) -> None:
        super().__init__(self.SOURCE_ID, load_messages=True, store_inputs=False, store_outputs=False)

    async def get_messages(self, session_id: str | None, *, state: dict[str, Any] | None = None,
                           **kwargs: Any) -> list[Message]:
        return []

    async def save_messages(self, session_id: str | None, messages: Sequence[Message], *,
                            state: dict[str, Any] | None = None, **kwargs: Any) -> None:
        return None


def own_history_provider(agent: Any) -> str | None:
    """The source id of a history provider of the agent's own that loads messages (the service cannot host
    such an agent without showing the model its conversation twice), else None."""
    for provider in getattr(agent, "context_providers", None) or ():
        if isinstance(provider, HistoryProvider) and provider.load_messages \
                and not isinstance(provider, ConversationKeptByService):
            return str(provider.source_id)
    return None


def prepare(agent: Any) -> None:
    """Give the agent the history provider that keeps Agent Framework from adding its in-memory one."""
    providers = getattr(agent, "context_providers", None)
    if isinstance(providers, list) and not any(isinstance(p, HistoryProvider) and p.load_messages
                                               for p in providers):
        providers.append(ConversationKeptByService())


def restore(agent: Any, state: Any, session_id: str) -> AgentSession:
    """The session the previous step (or the chain's previous turn) kept, else a new one from the agent,
    with ``session_id`` (the chain's id: the same on every attempt, and on every turn of the chain)."""
    saved = state.get(SESSION_KEY) if isinstance(state, dict) else None
    if isinstance(saved, dict):
        return AgentSession.from_dict(saved)
    create = getattr(agent, "create_session", None)
    made = create(session_id=session_id) if callable(create) else None
    return made if isinstance(made, AgentSession) else AgentSession(session_id=session_id)


def saved(session: AgentSession) -> dict[str, Any]:
    """The session as Agent Framework serialises it (JSON: the step's state is stored as JSON; a provider
    state that is not fails the step with a message saying so)."""
    return session.to_dict()


def without_provider_context(messages: Sequence[Message]) -> list[Message]:
    """The conversation without what context providers added for this run (attributed messages): they
    add it again at the next step's run."""
    return [m for m in messages if "_attribution" not in (m.additional_properties or {})]
