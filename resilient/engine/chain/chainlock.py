"""Per-chain steering lock: the pure state machine behind the ``chain_lock`` Durable entity.

One entity per conversation chain (key = chain id) holds ``{"active": id | None, "queue": [ids]}``.
Durable entities process operations one at a time, so these functions need no locking of their own;
they must only be deterministic and total (every input gives an answer, never an exception), because
an entity that throws poisons the caller's orchestration.

A chain named by a response id is a stored root turn's own chain, and its lock starts out held by that
root (:func:`initial_state`). Nobody can queue on such a chain before the root exists (a later turn
names the root), so the root needs no ``acquire``: its run starts without the entity round trip (a
message to the entity, its batch, the answer, one more orchestrator episode), and a later turn whose
``acquire`` reaches the entity first still queues behind it. A conversation's chain starts free.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

from resilient.ids import RESPONSE_PREFIX


class ChainState(TypedDict):
    active: str | None
    queue: list[str]


def empty_state() -> ChainState:
    return {"active": None, "queue": []}


def initial_state(key: str) -> ChainState:
    """The state of a chain's lock before its first operation: held by the chain's root turn when the
    chain is named by a response id (see the module docstring), else free. Once any operation ran, the
    state is stored (a released lock is ``{"active": None, ...}``), so this never applies twice."""
    return {"active": key if key.startswith(RESPONSE_PREFIX) else None, "queue": []}


def coerce_state(raw: Any, key: str) -> ChainState:
    """A well-formed state from what storage holds for the chain ``key``; ``None`` (no state yet) is the
    chain's initial state."""
    if raw is None:
        return initial_state(key)
    if not isinstance(raw, dict):
        return empty_state()
    active = raw.get("active")
    queue = [str(x) for x in raw.get("queue", []) if isinstance(x, str)]
    return {"active": active if isinstance(active, str) else None, "queue": queue}


def acquire(state: ChainState, response_id: str) -> tuple[ChainState, dict[str, Any]]:
    """Grant the lock if free; otherwise queue (idempotent: a repeated acquire gives the same answer)."""
    if state["active"] in (None, response_id):
        return {"active": response_id, "queue": [q for q in state["queue"] if q != response_id]}, {
            "state": "granted"
        }
    queue = list(state["queue"])
    if response_id not in queue:
        queue.append(response_id)
    return {"active": state["active"], "queue": queue}, {
        "state": "queued",
        "position": queue.index(response_id) + 1,
        "active": state["active"],
    }


def release(state: ChainState, response_id: str) -> tuple[ChainState, dict[str, Any]]:
    """Release by the owner hands the lock to the head of the queue; by anyone else it is a no-op."""
    if state["active"] != response_id:
        return state, {"released": False, "next": None}
    queue = list(state["queue"])
    next_id = queue.pop(0) if queue else None
    return {"active": next_id, "queue": queue}, {"released": True, "next": next_id}


def remove(state: ChainState, response_id: str) -> tuple[ChainState, dict[str, Any]]:
    """Leave the queue (a cancelled queued turn). If the lock was already handed to it, pass it on."""
    if state["active"] == response_id:
        return release(state, response_id)
    queue = [q for q in state["queue"] if q != response_id]
    return {"active": state["active"], "queue": queue}, {"removed": len(queue) != len(state["queue"]), "next": None}


def apply(operation: str, state: ChainState, payload: Any) -> tuple[ChainState, dict[str, Any]]:
    """Dispatch one entity operation; unknown operations and bad payloads are answered, not raised.
    A payload may arrive as JSON text (a client's ``signal_entity`` encodes its input once more)."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            payload = None
    response_id = payload.get("response_id") if isinstance(payload, dict) else None
    if operation == "get":
        return state, {"active": state["active"], "queue": list(state["queue"])}
    if not isinstance(response_id, str):
        return state, {"error": "response_id required"}
    if operation == "acquire":
        return acquire(state, response_id)
    if operation == "release":
        return release(state, response_id)
    if operation == "remove":
        return remove(state, response_id)
    return state, {"error": f"unknown operation {operation!r}"}
