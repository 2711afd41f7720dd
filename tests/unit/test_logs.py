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


def test_the_converters_typing_notice_is_dropped_and_nothing_else(caplog: pytest.LogCaptureFixture) -> None:
    """The advisory comes from ``azure.functions`` itself, logged by the worker's activity-input decode."""
    import azure.functions._durable_functions as converter_module
    from azure.functions.durable_functions import ActivityTriggerConverter
    from azure.functions.meta import Datum

    logs.install()
    logs.install()  # idempotent
    logger = logging.getLogger(logs.DURABLE_CONVERTER_LOGGER)
    assert sum(isinstance(f, logs.NoExpectedTypeNoticeFilter) for f in logger.filters) == 1
    converter_module._no_expected_type_notice_emitted = False  # the library logs it once per process
    with caplog.at_level(logging.INFO, logger=logs.DURABLE_CONVERTER_LOGGER), pytest.warns(DeprecationWarning):
        assert ActivityTriggerConverter.decode(Datum('{"response_id": "r"}', "json"),
                                               trigger_metadata=None) == {"response_id": "r"}
        logger.info("another record of that logger")
    assert converter_module._no_expected_type_notice_emitted  # it did try to log the notice
    assert [r.getMessage() for r in caplog.records] == ["another record of that logger"]
