"""Every engine/http log line carries its response id (and phase) in the message App Insights stores."""

from __future__ import annotations

import logging

import pytest

from resilient import logs


def test_context_keys_are_appended_to_the_message(caplog: pytest.LogCaptureFixture) -> None:
    logs.install()
    logs.install()  # idempotent
    logger = logging.getLogger("resilient.engine")
    assert sum(isinstance(f, logs.ContextFilter) for f in logger.filters) == 1
    with caplog.at_level(logging.INFO, logger="resilient.engine"):
        logger.info("phase %s done", "x", extra={"response_id": "resp_1", "phase": 2, "unrelated": 5})
    (record,) = caplog.records
    assert record.getMessage() == "phase x done | response_id=resp_1 phase=2"


def test_repair_lines_carry_what_was_found(caplog: pytest.LogCaptureFixture) -> None:
    logs.install()
    logger = logging.getLogger("resilient.repair")
    with caplog.at_level(logging.WARNING, logger="resilient.repair"):
        logger.warning("repaired", extra={"response_id": "resp_1", "found": "Failed", "repair": 1})
    (record,) = caplog.records
    assert record.getMessage() == "repaired | response_id=resp_1 found=Failed repair=1"
