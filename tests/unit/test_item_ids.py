"""Item ids carry their response's id, so an ``item_reference`` names the response that holds its item;
anything that is not exactly that shape names no response (it can only be found along a chain)."""

from __future__ import annotations

import pytest

from resilient.ids import (
    ITEM_PREFIXES,
    InvalidId,
    is_safe_id,
    item_id,
    new_approval_request_id,
    new_function_call_id,
    new_input_item_id,
    new_mcp_call_id,
    new_message_id,
    new_response_id,
    response_of_item,
)


def test_every_generated_item_id_names_its_response_and_keeps_openais_prefix() -> None:
    rid = new_response_id()
    made = {
        "msg_": new_message_id(rid), "fc_": new_function_call_id(rid), "mcpr_": new_approval_request_id(rid),
        "mcp_": new_mcp_call_id(rid), "fco_": new_input_item_id("function_call_output", rid),
        "mcpa_": new_input_item_id("mcp_approval_response", rid), "rs_": new_input_item_id("reasoning", rid),
    }
    assert set(made) == set(ITEM_PREFIXES), "every prefix an item id may carry is made somewhere"
    for prefix, value in made.items():
        assert value.startswith(prefix + rid[len("resp_"):]), value
        assert len(value) == len(prefix) + 64 and is_safe_id(value)
        assert response_of_item(value) == rid
    assert new_input_item_id("message", rid).startswith("msg_")
    assert new_input_item_id("function_call", rid).startswith("fc_")
    assert len({new_message_id(rid) for _ in range(100)}) == 100, "64 random bits per item"


def test_an_item_id_is_made_only_for_a_well_formed_response_id() -> None:
    with pytest.raises(InvalidId):
        item_id("msg_", "resp_../../x")
    with pytest.raises(InvalidId):
        item_id("msg_", "resp_" + "A" * 48)  # generated response ids are lowercase hex
    with pytest.raises(ValueError, match="prefix"):
        item_id("call_", new_response_id())


RID_HEX = "0123456789abcdef" * 3


@pytest.mark.parametrize("value", [
    "msg_" + RID_HEX,  # an id given before item ids carried their response: 48 hex only
    "msg_" + RID_HEX + "0" * 15, "msg_" + RID_HEX + "0" * 17,  # one digit short, one too many
    "msg_" + RID_HEX.upper() + "0" * 16,  # not the generated (lowercase) shape
    "call_" + RID_HEX + "0" * 16, "resp_" + RID_HEX + "0" * 16, "xmsg_" + RID_HEX + "0" * 16,
    "msg_" + RID_HEX + "0" * 16 + "\n", "msg_../" + RID_HEX[3:] + "0" * 16, "msg_" + RID_HEX + "0" * 15 + "'",
    "", "msg_", "my-own-id", None, 7, ["msg_" + RID_HEX + "0" * 16],
])
def test_anything_else_names_no_response(value: object) -> None:
    assert response_of_item(value) is None


def test_a_matching_id_is_only_a_claim_about_a_response() -> None:
    """The shape says which response to read; whether it holds the item is for storage to answer."""
    assert response_of_item("mcpr_" + RID_HEX + "f" * 16) == "resp_" + RID_HEX
