"""Optional Entra ID auth: App Service Authentication (authsettingsV2) behind enableEntraAuth, off by default.

With it on, Easy Auth validates a bearer token on every request (401 without one) and the HTTP functions
drop their function-key check (RESILIENT_HTTP_AUTH_LEVEL=anonymous, read by function_app.py); with it off,
nothing changes: no auth resource, function keys as before.
"""

from __future__ import annotations

import json
from pathlib import Path

from resilient.functions.auth_level import HTTP_AUTH_LEVELS
from tests.infra.bicep_model import Declaration, Expr, Interp, load, value

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"


def _auth_resource() -> Declaration:
    api = load(INFRA / "app" / "api.bicep")
    found = [r for r in api.resources("Microsoft.Web/sites/config") if r.props.get("name") == "authsettingsV2"]
    assert len(found) == 1, "api.bicep must declare one authsettingsV2"
    return found[0]


def test_the_parameter_is_off_by_default_and_wired_through() -> None:
    main = load(INFRA / "main.bicep")
    assert main.params["enableEntraAuth"].type_text == "bool"
    assert main.params["enableEntraAuth"].default is False
    assert main.params["entraApiClientId"].default == ""
    module_params = main.modules["api"].props["params"]
    assert module_params["enableEntraAuth"].text == "enableEntraAuth"
    assert module_params["entraApiClientId"].text == "entraApiClientId"
    api = load(INFRA / "app" / "api.bicep")
    assert api.params["enableEntraAuth"].default is False  # the module alone is also off by default
    azd = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert azd["enableEntraAuth"]["value"] == "${ENABLE_ENTRA_AUTH=false}"
    assert azd["entraApiClientId"]["value"] == "${ENTRA_API_CLIENT_ID}"
    scope = main.outputs["ENTRA_API_SCOPE"].default
    assert isinstance(scope, Expr) and scope.text.startswith("enableEntraAuth ?") and "/.default" in scope.text


def test_easy_auth_exists_only_when_enabled_and_requires_a_token() -> None:
    auth = _auth_resource()
    assert auth.condition is not None and auth.condition.text.decode() == "(enableEntraAuth)"
    assert auth.props["parent"].text == "functionApp"
    props = auth.props["properties"]
    assert props["platform"]["enabled"] is True
    assert props["globalValidation"] == {"requireAuthentication": True, "unauthenticatedClientAction": "Return401"}
    assert props["httpSettings"]["requireHttps"] is True
    assert props["login"]["tokenStore"]["enabled"] is False


def test_entra_provider_validates_tokens_for_the_app_registration_without_a_secret() -> None:
    aad = _auth_resource().props["properties"]["identityProviders"]["azureActiveDirectory"]
    assert aad["enabled"] is True
    registration = aad["registration"]
    assert registration["clientId"].text == "entraApiClientId"
    assert "clientSecretSettingName" not in registration  # API only: no login flow, so no secret
    issuer = registration["openIdIssuer"]
    # The tenant's v2.0 issuer, from the cloud's own login endpoint (sovereign clouds included).
    assert isinstance(issuer, Interp)
    assert issuer.text == "'${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'"
    audiences = aad["validation"]["allowedAudiences"]
    assert [a.text for a in audiences] == ["entraApiClientId", "'api://${entraApiClientId}'"]
    assert set(aad) <= {"enabled", "registration", "validation"}


def test_auth_level_setting_follows_the_parameter_and_cannot_be_overridden() -> None:
    api = load(INFRA / "app" / "api.bicep")
    settings = api.possible_object(value(api.variables["httpAuthSettings"].value_node))
    level = settings["RESILIENT_HTTP_AUTH_LEVEL"]
    assert isinstance(level, Expr) and level.text == "enableEntraAuth ? 'anonymous' : 'function'"
    assert api.possible_strings(level) == {"anonymous", "function"} <= set(HTTP_AUTH_LEVELS)
    union = api.variables["allSettings"].value_node
    assert union is not None
    args = next(c for c in union.named_children if c.type == "arguments").named_children
    assert (args[-1].text or b"").decode() == "httpAuthSettings", "the auth level must win over appSettings"
    main_settings = load(INFRA / "main.bicep").modules["api"].props["params"]["appSettings"]
    assert "RESILIENT_HTTP_AUTH_LEVEL" not in main_settings
