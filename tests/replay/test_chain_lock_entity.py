"""The chain-lock entity, driven through the REAL SDK entity handle with the host's batch JSON protocol.

The host sends ``{"self": {name, key}, "exists", "state": <json text|null>, "batch": [{"name", "input"}]}``
(operation inputs JSON-encoded twice) and gets back ``{"entityExists", "entityState", "results", ...}``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from resilient.engine.chain import chainlock
from tests.replay.vocabulary import Lock, chain_lock_entity


@pytest.fixture(scope="module")
def handle() -> Any:
    """The chain-lock entity's handle (this module's own: the other modules replay the orchestrator)."""
    return chain_lock_entity()


def _rid(name: str) -> dict[str, str]:
    return {"response_id": name}


def test_acquire_grants_then_queues_in_order(handle: Any) -> None:
    lock = Lock(handle)
    a, b, c = lock.run(("acquire", _rid("resp_a")), ("acquire", _rid("resp_b")), ("acquire", _rid("resp_c")))
    assert a == {"state": "granted"}
    assert b == {"state": "queued", "position": 1, "active": "resp_a"}
    assert c["state"] == "queued" and c["position"] == 2
    assert lock.snapshot() == {"active": "resp_a", "queue": ["resp_b", "resp_c"]}


def test_acquire_is_idempotent_for_a_replayed_call(handle: Any) -> None:
    lock = Lock(handle)
    lock.run(("acquire", _rid("resp_a")), ("acquire", _rid("resp_b")))
    again = lock.run(("acquire", _rid("resp_a")), ("acquire", _rid("resp_b")))
    assert again == [{"state": "granted"}, {"state": "queued", "position": 1, "active": "resp_a"}]
    assert lock.snapshot()["queue"] == ["resp_b"]


def test_release_hands_over_in_fifo_order(handle: Any) -> None:
    lock = Lock(handle)
    lock.run(("acquire", _rid("resp_a")), ("acquire", _rid("resp_b")), ("acquire", _rid("resp_c")))
    (released,) = lock.run(("release", _rid("resp_a")))
    assert released == {"released": True, "next": "resp_b"}
    assert lock.snapshot() == {"active": "resp_b", "queue": ["resp_c"]}
    assert lock.run(("release", _rid("resp_b")), ("release", _rid("resp_c"))) == [
        {"released": True, "next": "resp_c"}, {"released": True, "next": None}]
    assert lock.snapshot() == {"active": None, "queue": []}


def test_duplicate_release_and_release_by_non_owner_are_no_ops(handle: Any) -> None:
    lock = Lock(handle)
    lock.run(("acquire", _rid("resp_a")), ("acquire", _rid("resp_b")))
    first, duplicate = lock.run(("release", _rid("resp_a")), ("release", _rid("resp_a")))
    assert first == {"released": True, "next": "resp_b"}
    assert duplicate == {"released": False, "next": None}
    (stranger,) = lock.run(("release", _rid("resp_zzz")))
    assert stranger == {"released": False, "next": None}
    assert lock.snapshot() == {"active": "resp_b", "queue": []}


def test_remove_leaves_the_queue_without_touching_the_owner(handle: Any) -> None:
    lock = Lock(handle)
    lock.run(("acquire", _rid("resp_a")), ("acquire", _rid("resp_b")), ("acquire", _rid("resp_c")))
    (removed,) = lock.run(("remove", _rid("resp_b")))
    assert removed == {"removed": True, "next": None}
    assert lock.snapshot() == {"active": "resp_a", "queue": ["resp_c"]}
    assert lock.run(("remove", _rid("resp_b"))) == [{"removed": False, "next": None}]


def test_remove_after_the_grant_raced_it_passes_the_lock_on(handle: Any) -> None:
    """A queued turn is cancelled just as the lock was handed to it: the lock must not leak."""
    lock = Lock(handle)
    lock.run(("acquire", _rid("resp_a")), ("acquire", _rid("resp_b")), ("acquire", _rid("resp_c")))
    lock.run(("release", _rid("resp_a")))  # the grant goes to resp_b…
    (removed,) = lock.run(("remove", _rid("resp_b")))  # …which was cancelled meanwhile
    assert removed == {"released": True, "next": "resp_c"}
    assert lock.snapshot() == {"active": "resp_c", "queue": []}


def test_bad_input_is_answered_not_raised(handle: Any) -> None:
    lock = Lock(handle)
    assert lock.run(("acquire", {"nope": 1})) == [{"error": "response_id required"}]
    assert lock.run(("explode", _rid("resp_a"))) == [{"error": "unknown operation 'explode'"}]
    assert lock.run(("get", None)) == [{"active": None, "queue": []}]


def test_state_survives_between_batches_like_the_host_persists_it(handle: Any) -> None:
    lock = Lock(handle)
    lock.run(("acquire", _rid("resp_a")))
    restored = Lock(handle)
    restored.state, restored.exists = lock.state, lock.exists
    assert restored.run(("acquire", _rid("resp_b"))) == [{"state": "queued", "position": 1, "active": "resp_a"}]
    stored = json.loads(restored.state or "null")
    assert chainlock.coerce_state(stored, restored.key) == {"active": "resp_a", "queue": ["resp_b"]}


def test_a_root_turns_chain_starts_held_by_the_root_and_a_conversation_starts_free(handle: Any) -> None:
    """A chain named by a response id is its root's: the root never asks, and whatever reaches the entity
    first (a later turn's ``acquire``, the root's own ``release``) finds the lock held by the root."""
    root = Lock(handle, key="resp_root")
    assert root.run(("get", None)) == [{"active": "resp_root", "queue": []}]
    assert Lock(handle, key="conv_x").run(("get", None)) == [{"active": None, "queue": []}]

    ahead = Lock(handle, key="resp_root")  # a next turn's acquire comes before the root has finished
    assert ahead.run(("acquire", _rid("resp_next"))) == [
        {"state": "queued", "position": 1, "active": "resp_root"}]
    assert ahead.run(("release", _rid("resp_root"))) == [{"released": True, "next": "resp_next"}]
    assert ahead.snapshot() == {"active": "resp_next", "queue": []}

    after = Lock(handle, key="resp_root")  # the root's release comes first: the lock is free for good
    assert after.run(("release", _rid("resp_root"))) == [{"released": True, "next": None}]
    assert after.snapshot() == {"active": None, "queue": []}
    assert after.run(("acquire", _rid("resp_next"))) == [{"state": "granted"}]


def test_a_root_whose_turn_is_given_up_frees_its_chain_with_remove(handle: Any) -> None:
    lock = Lock(handle, key="resp_root")
    assert lock.run(("remove", _rid("resp_root"))) == [{"released": True, "next": None}]
    assert lock.snapshot() == {"active": None, "queue": []}
