"""The Durable task hub comes from the TASKHUB_NAME app setting, with different hubs for local and deployed.

host.json says ``"hubName": "%TASKHUB_NAME%"``: the Durable extension resolves ``%Name%`` from app settings
(``DurableTaskOptions.ResolveAppSettingOptions`` → ``INameResolver.TryResolveWholeString``), and when the
setting is missing keeps the literal text, which ``AzureStorageOptions.ValidateHubName`` refuses at
start-up. The host double reads host.json the same way (``tests/hostdouble/config.py``), so these tests
read it through the double's reader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostdouble import config as host_config
from tests.infra.bicep_model import Expr, load

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"


def _sample_values() -> dict[str, str]:
    values: dict[str, str] = json.loads((ROOT / "local.settings.sample.json").read_text())["Values"]
    return values


def _deployed_default() -> str:
    default = load(INFRA / "main.bicep").params["taskHubName"].default
    assert isinstance(default, str)
    return default


def test_host_json_reads_the_hub_from_an_app_setting() -> None:
    hub = json.loads((ROOT / "host.json").read_text())["extensions"]["durableTask"]["hubName"]
    assert hub == "%TASKHUB_NAME%"


def test_local_and_deployed_hubs_differ_and_are_valid() -> None:
    local = _sample_values()["TASKHUB_NAME"]
    deployed = _deployed_default()
    azd_default = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]["taskHubName"]["value"]
    assert azd_default == f"${{AZURE_TASK_HUB_NAME={deployed}}}"
    assert local.lower() != deployed.lower(), "a local host on the cloud account would take the deployed app's work"
    for name in (local, deployed):
        assert host_config.load(ROOT, {"TASKHUB_NAME": name}).durable.hub_name == name


def test_bicep_sets_the_setting_and_the_scheduler_hub_from_one_parameter() -> None:
    main = load(INFRA / "main.bicep")
    param = main.params["taskHubName"]
    assert {"minLength", "maxLength"} <= set(param.decorator_names())
    settings = main.modules["api"].props["params"]["appSettings"]
    assert settings["TASKHUB_NAME"] == Expr(settings["TASKHUB_NAME"].node, "taskHubName")
    dts = main.modules["durableTaskScheduler"].props["params"]["taskHubName"]
    assert dts.text == "taskHubName"


def test_missing_setting_fails_start_up_like_the_host() -> None:
    with pytest.raises(host_config.ConfigError, match=r"'%TASKHUB_NAME%' is not a valid task hub name.*TASKHUB_NAME"):
        host_config.load(ROOT, {})
    with pytest.raises(host_config.ConfigError, match="not a valid task hub name"):
        host_config.load(ROOT, {"TASKHUB_NAME": ""})  # set but empty: resolves to "", also refused
    # The per-host override (what the test doubles use) wins over host.json, setting or not.
    override = {"AzureFunctionsJobHost__extensions__durableTask__hubName": "OverrideHub"}
    assert host_config.load(ROOT, override).durable.hub_name == "OverrideHub"


def test_name_resolution_is_all_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"extensions": {"durableTask": {"hubName": "%A%x%B%"}}}))
    assert host_config.load(tmp_path, {"A": "Hub", "B": "Two"}).durable.hub_name == "HubxTwo"
    # One name unresolved: the whole value stays literal (TryResolveWholeString fails), then is refused.
    with pytest.raises(host_config.ConfigError, match=r"'%A%x%B%'.*app setting B is not set"):
        host_config.load(tmp_path, {"A": "Hub"})
    assert host_config.resolve_setting_names("%A%x%B%", {"A": "Hub"}) == "%A%x%B%"
    assert host_config.resolve_setting_names("Hub%A", {"A": "x"}) == "Hub%A"  # an unclosed '%'
