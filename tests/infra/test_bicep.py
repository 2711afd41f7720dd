"""Static checks of the azd/Bicep deployment (azure.yaml, infra/).

No Bicep compiler runs here, so every template is parsed with two independent Bicep grammars
(tree-sitter-bicep, whose tree must have no ERROR/MISSING node, and pycep-parser's Lark grammar),
cross-module wiring is checked the way the compiler would (module paths, params, outputs), and the
security properties are read from the tree-sitter parse trees, not from raw text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pycep import BicepParser

from tests.infra.bicep_model import BicepFile, Expr, Interp, load, value, walk

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
BICEP_FILES = sorted(INFRA.rglob("*.bicep"))

ROLE_IDS = {
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "Storage Table Data Contributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
    "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
    "Cognitive Services OpenAI User": "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd",
}
STORAGE_ROLES = (
    "Storage Blob Data Owner",
    "Storage Queue Data Contributor",
    "Storage Table Data Contributor",
)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def bicep(rel: str) -> BicepFile:
    return load(INFRA / rel)


def single(f: BicepFile, full_type: str) -> Any:
    found = f.resources(full_type)
    assert len(found) == 1, f"{f.path.name}: expected one {full_type}, found {[d.name for d in found]}"
    return found[0]


def app_settings() -> dict[str, Any]:
    """Every app setting the function app can get: api.bicep's merged settings + main.bicep's appSettings."""
    api = bicep("app/api.bicep")
    config = [r for r in api.resources("Microsoft.Web/sites/config") if r.props.get("name") == "appsettings"]
    assert len(config) == 1, "api.bicep must set app settings through one sites/config 'appsettings'"
    settings = dict(api.possible_object(config[0].props["properties"]))
    from_main = bicep("main.bicep").modules["api"].props["params"]["appSettings"]
    assert isinstance(from_main, dict)
    settings.update(from_main)
    return settings


# --- every file parses -------------------------------------------------------------------------


def test_infra_has_the_expected_files() -> None:
    names = {_rel(p) for p in BICEP_FILES}
    expected = {
        "infra/main.bicep",
        "infra/app/api.bicep",
        "infra/app/storage.bicep",
        "infra/app/identity.bicep",
        "infra/app/rbac.bicep",
        "infra/app/monitoring.bicep",
        "infra/app/openai.bicep",
    }
    assert expected <= names


@pytest.mark.parametrize("path", BICEP_FILES, ids=_rel)
def test_tree_sitter_parses_without_errors(path: Path) -> None:
    f = load(path)
    assert f.errors == [], f"{_rel(path)} has syntax errors: {f.errors}"
    assert not f.root.has_error
    assert f.declarations, f"{_rel(path)} declares nothing"


@pytest.mark.parametrize("path", BICEP_FILES, ids=_rel)
def test_pycep_parses(path: Path) -> None:
    parsed = BicepParser().parse(file_path=path)
    f = load(path)
    # The two grammars agree on what is declared.
    assert set(parsed.get("parameters", {})) == set(f.params)
    assert set(parsed.get("outputs", {})) == set(f.outputs)
    assert set(parsed.get("modules", {})) == set(f.modules)


@pytest.mark.parametrize("path", BICEP_FILES, ids=_rel)
def test_no_spread_syntax(path: Path) -> None:
    # `{...x}` / `[...x]` needs a recent compiler and our parsers reject it.
    assert not any(n.type.startswith("spread") for n in walk(load(path).root))


# --- module wiring (what the compiler would check) ----------------------------------------------


def _local_modules() -> list[tuple[BicepFile, Any, BicepFile]]:
    out = []
    for path in BICEP_FILES:
        f = load(path)
        for mod in f.modules.values():
            if mod.type_text.startswith("br:") or mod.type_text.startswith("br/") or ":" in mod.type_text:
                continue
            target = (path.parent / mod.type_text).resolve()
            assert target.is_file(), f"{_rel(path)}: module {mod.name} -> missing {mod.type_text}"
            out.append((f, mod, load(target)))
    return out


def test_module_params_match_the_module_files() -> None:
    for f, mod, target in _local_modules():
        passed = mod.props.get("params", {})
        assert isinstance(passed, dict)
        unknown = set(passed) - set(target.params)
        assert not unknown, f"{f.path.name}: module {mod.name} passes unknown params {unknown}"
        required = {n for n, p in target.params.items() if p.value_node is None}
        missing = required - set(passed)
        assert not missing, f"{f.path.name}: module {mod.name} misses required params {missing}"


def test_module_outputs_used_exist() -> None:
    for f, mod, target in _local_modules():
        used = set(re.findall(rf"\b{mod.name}!?\.outputs\.(\w+)", f.source.decode()))
        unknown = used - set(target.outputs)
        assert not unknown, f"{f.path.name}: {mod.name}.outputs has no {unknown}"


def test_abbreviations_used_exist() -> None:
    abbrs = json.loads((INFRA / "abbreviations.json").read_text())
    used = set(re.findall(r"\babbrs\.(\w+)", (INFRA / "main.bicep").read_text()))
    assert used, "main.bicep is expected to name resources from abbreviations.json"
    assert used <= set(abbrs), f"unknown abbreviations {used - set(abbrs)}"


# --- main.bicep / parameters / azure.yaml ------------------------------------------------------


def test_main_bicep_parameters_and_outputs() -> None:
    main = bicep("main.bicep")
    assert main.target_scope == "subscription"
    assert len(main.resources("Microsoft.Resources/resourceGroups")) == 1
    params = main.params
    for name in (
        "environmentName",
        "location",
        "openAiModelName",
        "openAiModelVersion",
        "openAiDeploymentName",
    ):
        assert name in params, name
    assert params["principalId"].default == ""
    for flag in ("enableAzureOpenAI", "useDurableTaskScheduler"):
        assert params[flag].type_text == "bool"
        assert params[flag].default is False
    assert params["replayRetentionMinutes"].type_text == "int"
    for out in (
        "AZURE_LOCATION",
        "AZURE_TENANT_ID",
        "SERVICE_API_NAME",
        "SERVICE_API_URI",
        "AZURE_FUNCTION_APP_NAME",
        "AZURE_STORAGE_ACCOUNT_NAME",
    ):
        assert out in main.outputs, out
    # The optional pieces are really optional.
    assert main.modules["openAi"].condition is not None
    assert main.modules["openAi"].condition.text.decode() == "(enableAzureOpenAI)"


def test_main_parameters_json() -> None:
    doc = json.loads((INFRA / "main.parameters.json").read_text())
    params = doc["parameters"]
    declared = set(bicep("main.bicep").params)
    assert set(params) <= declared, f"not declared in main.bicep: {set(params) - declared}"
    assert params["environmentName"]["value"] == "${AZURE_ENV_NAME}"
    assert params["location"]["value"] == "${AZURE_LOCATION}"
    assert params["principalId"]["value"] == "${AZURE_PRINCIPAL_ID}"


def test_azure_yaml() -> None:
    doc = yaml.safe_load((ROOT / "azure.yaml").read_text())
    assert doc["name"]
    api = doc["services"]["api"]
    assert api["host"] == "function"
    assert api["language"] == "python"
    assert (ROOT / api["project"]).resolve() == ROOT
    assert doc["infra"]["provider"] == "bicep"
    assert (ROOT / doc["infra"]["path"]).resolve() == INFRA
    # The service name azd deploys to is the tag on the function app.
    site = single(bicep("app/api.bicep"), "Microsoft.Web/sites")
    tags = bicep("app/api.bicep").possible_object(site.props["tags"])
    service = bicep("app/api.bicep").resolve(tags["azd-service-name"])
    assert service == "api"
    assert bicep("main.bicep").modules["api"].props["params"]["serviceName"] == "api"


# --- storage -----------------------------------------------------------------------------------


def test_storage_account_is_identity_only_and_https_only() -> None:
    f = bicep("app/storage.bicep")
    st = single(f, "Microsoft.Storage/storageAccounts")
    props = st.props["properties"]
    assert props["allowSharedKeyAccess"] is False
    assert props["allowBlobPublicAccess"] is False
    assert props["minimumTlsVersion"] == "TLS1_2"
    assert props["supportsHttpsTrafficOnly"] is True
    assert props.get("isHnsEnabled", False) is False  # append blobs need a flat namespace
    # pycep's grammar reads the same values.
    parsed = BicepParser().parse(file_path=f.path)["resources"][st.name]["config"]["properties"]
    assert parsed["allowSharedKeyAccess"] is False
    assert parsed["minimumTlsVersion"] == "TLS1_2"
    assert parsed["supportsHttpsTrafficOnly"] is True


def test_storage_services_and_deployment_container() -> None:
    f = bicep("app/storage.bicep")
    for svc in ("blobServices", "queueServices", "tableServices"):
        assert len(f.resources(f"Microsoft.Storage/storageAccounts/{svc}")) == 1, svc
    container = single(f, "Microsoft.Storage/storageAccounts/blobServices/containers")
    assert container.props["name"] == Expr(container.body, "deploymentContainerName")
    assert container.props["properties"]["publicAccess"] == "None"
    main = bicep("main.bicep")
    container_name = main.variables["deploymentStorageContainerName"].default
    assert isinstance(container_name, Expr)
    assert "'app-package-" in container_name.text
    assert (
        main.modules["storage"].props["params"]["deploymentContainerName"].text
        == "deploymentStorageContainerName"
    )
    assert main.modules["api"].props["params"]["deploymentStorageContainerName"].text == (
        "deploymentStorageContainerName"
    )


# --- function app ------------------------------------------------------------------------------


def test_flex_consumption_plan() -> None:
    plan = single(bicep("app/api.bicep"), "Microsoft.Web/serverfarms")
    assert plan.props["sku"] == {"name": "FC1", "tier": "FlexConsumption"}
    assert plan.props["properties"]["reserved"] is True


def test_function_app_security_and_flex_config() -> None:
    api = bicep("app/api.bicep")
    site = single(api, "Microsoft.Web/sites")
    assert site.props["kind"] == "functionapp,linux"
    props = site.props["properties"]
    assert props["httpsOnly"] is True
    assert props["siteConfig"]["minTlsVersion"] == "1.2"
    assert props["siteConfig"]["ftpsState"] == "Disabled"
    assert site.props["identity"]["type"] == "UserAssigned"

    cfg = props["functionAppConfig"]
    storage = cfg["deployment"]["storage"]
    assert storage["type"] == "blobContainer"
    assert isinstance(storage["value"], Interp)
    assert "deploymentStorageContainerName" in storage["value"].text
    assert storage["authentication"]["type"] == "UserAssignedIdentity"
    assert storage["authentication"]["userAssignedIdentityResourceId"].text == "identityId"
    assert "storageAccountConnectionStringName" not in storage["authentication"]
    assert set(cfg["scaleAndConcurrency"]) == {"maximumInstanceCount", "instanceMemoryMB", "alwaysReady", "triggers"}
    # always-ready instances only when asked for (each is billed while idle)
    assert "httpAlwaysReadyInstances > 0" in cfg["scaleAndConcurrency"]["alwaysReady"].text
    assert api.resolve(api.params["httpAlwaysReadyInstances"].default) == 0
    # set explicitly: Flex Consumption's default for Python is one HTTP request per instance
    assert cfg["scaleAndConcurrency"]["triggers"]["http"]["perInstanceConcurrency"].text == "httpPerInstanceConcurrency"
    assert api.resolve(cfg["scaleAndConcurrency"]["triggers"]["http"]["perInstanceConcurrency"]) == 100
    runtime = cfg["runtime"]
    assert api.resolve(runtime["name"]) == "python"
    assert api.resolve(runtime["version"]) == "3.13"
    main_params = bicep("main.bicep").modules["api"].props["params"]
    assert main_params["runtimeName"] == "python"
    assert main_params["runtimeVersion"] == "3.13"


def test_app_settings_are_identity_based() -> None:
    settings = app_settings()
    assert settings["AzureWebJobsStorage__credential"] == "managedidentity"
    for suffix in ("clientId", "accountName", "blobServiceUri", "queueServiceUri", "tableServiceUri"):
        assert f"AzureWebJobsStorage__{suffix}" in settings, suffix
    api = bicep("app/api.bicep")
    assert settings["AzureWebJobsStorage__clientId"].text == "identityClientId"
    assert settings["AZURE_CLIENT_ID"].text == "identityClientId"
    assert bicep("main.bicep").modules["api"].props["params"]["identityClientId"].text == (
        "identity.outputs.clientId"
    )
    auth = settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"]
    assert isinstance(auth, Interp)
    assert auth.text == "'ClientId=${identityClientId};Authorization=AAD'"
    # No key-based or Flex-rejected settings.
    for banned in (
        "AzureWebJobsStorage",
        "FUNCTIONS_WORKER_RUNTIME",
        "FUNCTIONS_EXTENSION_VERSION",
        "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
        "WEBSITE_CONTENTSHARE",
        "AZURE_OPENAI_API_KEY",
        "APPINSIGHTS_INSTRUMENTATIONKEY",
    ):
        assert banned not in settings, banned
    assert api.possible_object(value(api.variables["storageSettings"].value_node))


def test_app_settings_for_the_app() -> None:
    settings = app_settings()
    assert settings["PYTHON_ENABLE_INIT_INDEXING"] == "1"
    assert settings["RESILIENT_STORAGE_PREFIX"] == "resilient"
    assert settings["RESILIENT_STEERABLE_CONVERSATIONS"] == "true"
    assert settings["RESILIENT_ENABLE_CRASH_ENDPOINT"] == "false"
    assert settings["RESILIENT_REPLAY_RETENTION_MINUTES"].text == "string(replayRetentionMinutes)"
    for name in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_DEPLOYMENT"):
        expr = settings[name]
        assert isinstance(expr, Expr)
        assert expr.kind == "ternary_expression" and expr.text.startswith("enableAzureOpenAI ?")
        assert expr.text.endswith(": ''"), f"{name} must be empty when Azure OpenAI is disabled"


# --- monitoring / OpenAI / DTS -----------------------------------------------------------------


def test_application_insights_local_auth_disabled() -> None:
    f = bicep("app/monitoring.bicep")
    appi = single(f, "Microsoft.Insights/components")
    props = appi.props["properties"]
    assert props["DisableLocalAuth"] is True
    assert props["WorkspaceResourceId"].text == "logAnalytics.id"
    assert len(f.resources("Microsoft.OperationalInsights/workspaces")) == 1


def test_openai_account_is_entra_only() -> None:
    f = bicep("app/openai.bicep")
    account = single(f, "Microsoft.CognitiveServices/accounts")
    assert account.props["kind"] == "OpenAI"
    props = account.props["properties"]
    assert props["disableLocalAuth"] is True
    assert props["customSubDomainName"].text == "customSubDomainName"
    assert f.params["customSubDomainName"].value_node is not None
    deployment = single(f, "Microsoft.CognitiveServices/accounts/deployments")
    model = deployment.props["properties"]["model"]
    assert (model["name"].text, model["version"].text) == ("modelName", "modelVersion")


def test_durable_task_scheduler_is_optional_and_identity_based() -> None:
    main = bicep("main.bicep")
    assert main.modules["durableTaskScheduler"].condition is not None
    settings = bicep("app/api.bicep").possible_object(
        value(bicep("app/api.bicep").variables["durableTaskSchedulerSettings"].value_node)
    )
    conn = settings["DURABLE_TASK_SCHEDULER_CONNECTION_STRING"]
    assert isinstance(conn, Interp) and "Authentication=ManagedIdentity" in conn.text
    assert settings["AzureFunctionsJobHost__extensions__durableTask__storageProvider__type"] == "azureManaged"
    scheduler = single(bicep("app/dts.bicep"), "Microsoft.DurableTask/schedulers")
    assert scheduler.props["properties"]["ipAllowlist"].text == "ipAllowlist"
    assert bicep("app/dts.bicep").params["ipAllowlist"].default, "an empty allow list denies all traffic"


# --- role assignments --------------------------------------------------------------------------


def _role_assignments() -> list[tuple[BicepFile, Any, set[str]]]:
    """(file, declaration, role definition GUIDs it can assign) for every role assignment."""
    out = []
    for path in BICEP_FILES:
        f = load(path)
        for ra in f.resources("Microsoft.Authorization/roleAssignments"):
            role_expr = ra.props["properties"]["roleDefinitionId"]
            assert isinstance(role_expr, Expr) and role_expr.kind == "call_expression"
            assert role_expr.node.named_children[0].text == b"subscriptionResourceId"
            args = role_expr.node.named_children[1].named_children
            assert value(args[0]) == "Microsoft.Authorization/roleDefinitions"
            last = value(args[-1])
            if ra.loop is not None and isinstance(last, Expr) and last.text == ra.loop[0]:
                roles = f.possible_strings(value(ra.loop[1]))
            else:
                roles = f.possible_strings(last)
            assert roles, f"{f.path.name}: cannot resolve the role of {ra.name}"
            out.append((f, ra, roles))
    return out


def test_every_required_role_is_assigned() -> None:
    assigned = set().union(*(roles for _, _, roles in _role_assignments()))
    missing = {name for name, guid in ROLE_IDS.items() if guid not in assigned}
    assert not missing, f"roles never assigned: {missing}"


def test_roles_go_to_the_app_identity_and_the_optional_user() -> None:
    by_principal: dict[str, set[str]] = {}
    for _, ra, roles in _role_assignments():
        principal = ra.props["properties"]["principalId"]
        assert isinstance(principal, Expr)
        by_principal.setdefault(principal.text, set()).update(roles)
    app = by_principal["managedIdentityPrincipalId"]
    user = by_principal["userPrincipalId"]
    for name in (*STORAGE_ROLES, "Monitoring Metrics Publisher", "Cognitive Services OpenAI User"):
        assert ROLE_IDS[name] in app, f"app identity lacks {name}"
        assert ROLE_IDS[name] in user, f"principalId lacks {name}"
    rbac = bicep("app/rbac.bicep")
    assert rbac.params["userPrincipalId"].default == ""
    main_params = bicep("main.bicep").modules["rbac"].props["params"]
    assert main_params["managedIdentityPrincipalId"].text == "identity.outputs.principalId"
    assert main_params["userPrincipalId"].text == "principalId"


def test_user_and_optional_assignments_are_conditional() -> None:
    for _, ra, roles in _role_assignments():
        principal = ra.props["properties"]["principalId"].text
        conditional = ra.condition is not None or (ra.loop is not None and "?" in ra.loop[1].text.decode())
        if principal == "userPrincipalId":
            assert conditional, f"{ra.name} must be skipped when principalId is empty"
        if ROLE_IDS["Cognitive Services OpenAI User"] in roles:
            assert ra.condition is not None and b"enableOpenAi" in ra.condition.text, ra.name


# --- no keys anywhere ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", BICEP_FILES, ids=_rel)
def test_no_key_material(path: Path) -> None:
    f = load(path)
    for name, _ in f.calls():
        assert not name.lower().startswith("list"), f"{_rel(path)} calls {name}()"
    for text in f.strings():
        for banned in ("AccountKey", "SharedAccessSignature", "InstrumentationKey="):
            assert banned.lower() not in text.lower(), f"{_rel(path)}: {text}"
    for param in f.params.values():
        assert "secure" not in param.decorator_names(), f"{_rel(path)}: secret parameter {param.name}"


def test_no_key_material_in_other_deploy_files() -> None:
    for path in (ROOT / "azure.yaml", INFRA / "main.parameters.json", INFRA / "abbreviations.json"):
        text = path.read_text().lower()
        assert "accountkey" not in text and "listkeys" not in text, path.name
