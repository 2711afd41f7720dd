"""RESILIENT_HTTP_AUTH_LEVEL: function keys by default; "anonymous" only for App Service Authentication.

infra/ sets "anonymous" exactly when it puts Easy Auth (Entra ID) in front of the app (tests/infra checks
that pairing); here: what each value does to the functions the worker indexes.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

import azure.functions as func
import pytest

from tests.fresh_app import fresh_app


def _http_auth_levels() -> dict[str, func.AuthLevel]:
    levels: dict[str, func.AuthLevel] = {}
    for function in fresh_app().get_functions():
        trigger = function.get_trigger()
        if trigger.get_binding_name() == "httpTrigger":
            levels[function.get_function_name()] = trigger.auth_level
    return levels


@pytest.fixture(autouse=True)
def _forget_app() -> Iterator[None]:
    yield
    sys.modules.pop("function_app", None)


ALWAYS_ANONYMOUS = ("health_check", "api_root")  # probes and the pointer to the API need no key


def test_function_keys_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESILIENT_HTTP_AUTH_LEVEL", raising=False)
    levels = _http_auth_levels()
    assert levels.pop("crash_worker") == func.AuthLevel.ADMIN
    assert [levels.pop(name) for name in ALWAYS_ANONYMOUS] == [func.AuthLevel.ANONYMOUS] * 2
    assert len(levels) >= 5 and set(levels.values()) == {func.AuthLevel.FUNCTION}


def test_anonymous_leaves_the_check_to_easy_auth_but_not_the_crash_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESILIENT_HTTP_AUTH_LEVEL", " Anonymous ")
    levels = _http_auth_levels()
    assert levels.pop("crash_worker") == func.AuthLevel.ADMIN
    for name in ALWAYS_ANONYMOUS:
        levels.pop(name)
    assert len(levels) >= 5 and set(levels.values()) == {func.AuthLevel.ANONYMOUS}


def test_an_unknown_level_stops_indexing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESILIENT_HTTP_AUTH_LEVEL", "admin")
    sys.modules.pop("function_app", None)
    with pytest.raises(ValueError, match="RESILIENT_HTTP_AUTH_LEVEL"):
        importlib.import_module("function_app")
