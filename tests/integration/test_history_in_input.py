"""A turn whose input is its whole history (an approval answer that resent it without
``previous_response_id``, ``continuation.answered_turn``): its agent sees no earlier turn, a later turn's
history stops at it, and the agent state of the turn it answers still carries over. Real Azurite."""

from __future__ import annotations

from typing import Any

import pytest

from resilient.engine.chain.continuation import HISTORY_IN_INPUT_KEY
from resilient.engine.run.agent_request import STATE_KEY, history
from resilient.ids import new_message_id, new_response_id
from resilient.storage.factory import Storage

pytestmark = [pytest.mark.azurite, pytest.mark.asyncio(loop_scope="session")]


def _message(response_id: str, role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "id": new_message_id(response_id), "role": role,
            "content": [{"type": kind, "text": text}]}


async def _turn(storage: Storage, inputs: list[str], output: str, **doc: Any) -> tuple[str, list[dict[str, Any]]]:
    response_id = new_response_id()
    items = [_message(response_id, "user", text) for text in inputs]
    await storage.responses.create(response_id, "completed", {"model": "m", "store": True, **doc})
    await storage.items.put_input_items(response_id, items)
    answer = _message(response_id, "assistant", output)
    await storage.items.put_output_items(response_id, 0, [answer])
    return response_id, [*items, answer]


def _texts(items: list[dict[str, Any]]) -> list[str]:
    return [str(item["content"][0]["text"]) for item in items]


@pytest.mark.parametrize("flagged", [True, False])
async def test_history_stops_at_a_turn_that_holds_its_own(azurite_storage: Storage, flagged: bool) -> None:
    storage = azurite_storage
    paused, _ = await _turn(storage, ["question"], "paused", **{STATE_KEY: {"saved": 1}})
    answered, answered_items = await _turn(storage, ["question", "paused (resent)"], "resumed",
                                           previous_turn=paused, **{HISTORY_IN_INPUT_KEY: flagged})
    follow_up, _ = await _turn(storage, ["and then?"], "more", previous_turn=answered)

    state: list[Any] = []
    own = await history(storage, await storage.responses.get(answered), state)
    later = await history(storage, await storage.responses.get(follow_up))
    if flagged:
        assert own == [] and state == [{"saved": 1}]  # no earlier turn, but the paused turn's agent state
        assert _texts(later) == _texts(answered_items) == ["question", "paused (resent)", "resumed"]
    else:  # the control: an ordinary chained turn reads the turns before it
        assert _texts(own) == ["question", "paused"] and state == [{"saved": 1}]
        assert _texts(later) == ["question", "paused", "question", "paused (resent)", "resumed"]
