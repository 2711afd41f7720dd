"""RESILIENT_BASE_URL: the scenario and contract suites target a running host; only double-only tests skip."""

from __future__ import annotations

import pytest

from tests import live


def test_unset_means_start_the_double_and_skip_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in (None, "", "  "):
        if value is None:
            monkeypatch.delenv(live.SETTING, raising=False)
        else:
            monkeypatch.setenv(live.SETTING, value)
        assert live.base_url() is None
        live.skip_if_live("anything")  # returns: nothing is skipped


def test_set_means_that_url_and_a_skip_that_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(live.SETTING, "http://127.0.0.1:7071/")
    assert live.base_url() == "http://127.0.0.1:7071"
    with pytest.raises(pytest.skip.Exception) as skipped:
        live.skip_if_live("it kills the worker")
    assert str(skipped.value) == ("needs the host double (it kills the worker); "
                                  "RESILIENT_BASE_URL=http://127.0.0.1:7071 is a host this test cannot control")
