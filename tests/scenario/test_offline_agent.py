"""The offline sample agent uses the prompt and the chain's previous turn (a follow-up shows the conversation)."""

from __future__ import annotations

from openai import OpenAI

from tests.scenario.conftest import knobs


def test_a_follow_up_turn_mentions_the_previous_question_and_its_own(client: OpenAI) -> None:
    first = client.responses.create(model="m", input="How do durable functions recover?", metadata=knobs(1, 12))
    assert "On How do durable functions recover?:" in first.output_text
    second = client.responses.create(model="m", input="And the costs?", previous_response_id=first.id,
                                     metadata=knobs(1, 16))
    assert second.output_text.startswith('[scope] Following up on "How do durable functions recover?": On And')
