"""A turn's place on its chain: registering it behind the turns ahead, and steering those turns.

S1/S3: with steering off, a busy chain refuses a new turn (``conversation_locked``); a
``previous_response_id`` that is not the chain's newest turn is a fork, refused too. S2: every unfinished
turn ahead sees one more turn waiting behind it, and a running phase finishes early when it reads that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resilient.engine.chain.refusals import Contended, Refused
from resilient.protocol import errors
from resilient.storage.cas import CHAIN_CAS_ATTEMPTS, retry_cas
from resilient.storage.errors import NotFound
from resilient.storage.ports import ACTIVE_STATUSES

STEERING_KEY = "steering"  # in a row's document: this turn was queued behind a running turn it steered

if TYPE_CHECKING:
    from resilient.storage.factory import Storage



async def register_turn(storage: Storage, chain_id: str, response_id: str, previous: str | None, *,
                        is_conversation: bool, steerable: bool) -> tuple[list[str], str | None]:
    """Append this turn to its chain (one CAS on the chain row); return the unfinished turns ahead and
    the chain's previous newest turn (the start of this turn's history).

    S1/S3: with steering off, a busy chain is refused (``conversation_locked``). A
    ``previous_response_id`` that is not the chain's newest turn is a fork (refused). A chain named by a
    response id has no row until its second turn: its root is then the newest and only turn.
    """
    chains = storage.chains

    async def attempt() -> tuple[list[str], str | None]:
        chain = await chains.get(chain_id)
        rooted = chain.etag is None and not is_conversation
        latest = chain.latest_response_id or (chain_id if rooted else None)
        if previous is not None and latest is not None and latest != previous and await exists(storage, latest):
            raise Refused(
                errors.CODE_FORK_NOT_SUPPORTED,
                "previous_response_id must be the latest response of its conversation chain; "
                "forking a chain is not supported.", param="previous_response_id")
        candidates = list(chain.open_turns) or ([chain_id] if rooted else [])
        ahead = [turn for turn in candidates if await active(storage, turn)]
        if ahead and not steerable:
            raise Refused(errors.CODE_CONVERSATION_LOCKED,
                          "Another response is in progress on this conversation; try again when it "
                          "completes.", param="previous_response_id" if previous else "conversation")
        # a lost CAS: another turn landed on this chain meanwhile: look again
        await chains.append_turn(chain, response_id, [*ahead, response_id])
        return ahead, latest

    return await retry_cas(attempt, CHAIN_CAS_ATTEMPTS, Contended)


async def status(storage: Storage, response_id: str) -> str | None:
    """The turn's status, or None when it has no row (deleted, or a create that never finished)."""
    try:
        return (await storage.responses.get_control(response_id)).status
    except NotFound:
        return None


async def active(storage: Storage, response_id: str) -> bool:
    return await status(storage, response_id) in ACTIVE_STATUSES


async def exists(storage: Storage, response_id: str) -> bool:
    return await status(storage, response_id) is not None


async def steer(storage: Storage, turns: list[str], delta: int) -> None:
    """S2: every unfinished turn ahead sees one more (or, on a queued turn's cancel, one fewer) turn
    waiting behind it; a running phase reads the live count and finishes early."""
    for turn in turns:
        try:
            await storage.responses.add_pending_input(turn, delta)
        except NotFound:
            continue


async def turns_ahead(storage: Storage, chain_id: str, response_id: str) -> list[str]:
    """The unfinished turns queued on the chain before this one."""
    chain = await storage.chains.get(chain_id)
    turns = list(chain.open_turns)
    ahead = turns[: turns.index(response_id)] if response_id in turns else []
    return [turn for turn in ahead if await active(storage, turn)]
