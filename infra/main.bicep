// Resilient Responses: Azure Functions (Python 3.13, Flex Consumption) + Durable Functions, with
// identity-only access to Azure Storage (tables, queues, append blobs) and optional Azure OpenAI.
// Layout follows Azure-Samples/durable-functions-quickstart-python-azd (azd + Bicep).
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('Name of the azd environment; used to derive a short unique token for resource names.')
param environmentName string

@minLength(1)
@description('Primary location for all resources. Must be a region that offers the Flex Consumption plan.')
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Object id of the deploying user (azd sets AZURE_PRINCIPAL_ID). Gets the same data roles as the app identity, for local runs against the cloud account. Leave empty to skip.')
param principalId string = ''

@description('Principal type of principalId: User for a person, ServicePrincipal for a CI identity.')
@allowed([
  'User'
  'ServicePrincipal'
])
param principalType string = 'User'

@description('Deploy an Azure OpenAI account and model deployment, and point the app at it.')
param enableAzureOpenAI bool = false

@description('Region of the Azure OpenAI account (model availability differs by region).')
param openAiLocation string = location

@description('Model to deploy when enableAzureOpenAI is true.')
param openAiModelName string = 'gpt-4o-mini'

@description('Model version to deploy when enableAzureOpenAI is true.')
param openAiModelVersion string = '2024-07-18'

@description('Name of the model deployment (AZURE_OPENAI_DEPLOYMENT).')
param openAiDeploymentName string = 'gpt-4o-mini'

@description('Deployment SKU of the model: GlobalStandard, Standard, DataZoneStandard ...')
param openAiDeploymentSkuName string = 'GlobalStandard'

@description('Capacity of the model deployment, in thousands of tokens per minute.')
param openAiDeploymentCapacity int = 10

@description('Use the Durable Task Scheduler (Consumption SKU) as the Durable Functions backend instead of Azure Storage.')
param useDurableTaskScheduler bool = false

@description('Durable task hub name of the deployed app: its TASKHUB_NAME app setting, which host.json reads as hubName "%TASKHUB_NAME%". Local runs use another hub (local.settings.sample.json), so a local host pointed at this storage account never takes the work of the deployed app.')
@minLength(3)
@maxLength(45)
param taskHubName string = 'ResilientResponses'

@description('App Service Authentication with Entra ID: clients send a bearer token for entraApiClientId instead of a function key. Off by default; needs an app registration (README: Entra ID auth).')
param enableEntraAuth bool = false

@description('Application (client) id of the app registration clients get tokens for; required when enableEntraAuth is true.')
param entraApiClientId string = ''

@description('How long finished responses stay replayable (RESILIENT_REPLAY_RETENTION_MINUTES).')
@minValue(1)
param replayRetentionMinutes int = 10080

@description('Flex Consumption: upper bound of instances the app scales out to.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('Flex Consumption: memory of each instance.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Flex Consumption: always-ready instances for the HTTP functions (0 = none; each is billed while idle).')
@minValue(0)
@maxValue(100)
param httpAlwaysReadyInstances int = 0

// Optional name overrides (empty = generated).
param resourceGroupName string = ''
param apiServiceName string = ''
param apiUserAssignedIdentityName string = ''
param appServicePlanName string = ''
param storageAccountName string = ''
param logAnalyticsName string = ''
param applicationInsightsName string = ''
param openAiAccountName string = ''
param durableTaskSchedulerName string = ''

var abbrs = loadJsonContent('./abbreviations.json')
var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}
var functionAppName = !empty(apiServiceName) ? apiServiceName : '${abbrs.webSitesFunctions}api-${resourceToken}'
var deploymentStorageContainerName = toLower('app-package-${take(functionAppName, 32)}-${take(uniqueString(functionAppName, resourceToken), 7)}')
var effectiveStorageAccountName = !empty(storageAccountName) ? storageAccountName : '${abbrs.storageStorageAccounts}${resourceToken}'
var effectiveOpenAiAccountName = !empty(openAiAccountName) ? openAiAccountName : '${abbrs.openAiAccounts}${resourceToken}'
var effectiveSchedulerName = !empty(durableTaskSchedulerName) ? durableTaskSchedulerName : '${abbrs.durableTaskSchedulers}${resourceToken}'

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: !empty(resourceGroupName) ? resourceGroupName : '${abbrs.resourcesResourceGroups}${environmentName}'
  location: location
  tags: tags
}

// User-assigned identity of the function app: storage (host + app data), deployment package,
// App Insights ingestion, Azure OpenAI, Durable Task Scheduler.
module identity './app/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: !empty(apiUserAssignedIdentityName) ? apiUserAssignedIdentityName : '${abbrs.managedIdentityUserAssignedIdentities}api-${resourceToken}'
    location: location
    tags: tags
  }
}

module storage './app/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: effectiveStorageAccountName
    location: location
    tags: tags
    deploymentContainerName: deploymentStorageContainerName
  }
}

module monitoring './app/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: !empty(logAnalyticsName) ? logAnalyticsName : '${abbrs.operationalInsightsWorkspaces}${resourceToken}'
    applicationInsightsName: !empty(applicationInsightsName) ? applicationInsightsName : '${abbrs.insightsComponents}${resourceToken}'
    location: location
    tags: tags
  }
}

module openAi './app/openai.bicep' = if (enableAzureOpenAI) {
  name: 'openai'
  scope: rg
  params: {
    name: effectiveOpenAiAccountName
    location: openAiLocation
    tags: tags
    deploymentName: openAiDeploymentName
    modelName: openAiModelName
    modelVersion: openAiModelVersion
    deploymentSkuName: openAiDeploymentSkuName
    deploymentCapacity: openAiDeploymentCapacity
  }
}

module durableTaskScheduler './app/dts.bicep' = if (useDurableTaskScheduler) {
  name: 'durable-task-scheduler'
  scope: rg
  params: {
    name: effectiveSchedulerName
    location: location
    tags: tags
    taskHubName: taskHubName
  }
}

module rbac './app/rbac.bicep' = {
  name: 'rbac'
  scope: rg
  params: {
    storageAccountName: storage.outputs.name
    appInsightsName: monitoring.outputs.applicationInsightsName
    managedIdentityPrincipalId: identity.outputs.principalId
    userPrincipalId: principalId
    userPrincipalType: principalType
    enableOpenAi: enableAzureOpenAI
    openAiAccountName: effectiveOpenAiAccountName
    enableDurableTaskScheduler: useDurableTaskScheduler
    durableTaskSchedulerName: effectiveSchedulerName
  }
  dependsOn: [
    openAi
    durableTaskScheduler
  ]
}

module api './app/api.bicep' = {
  name: 'api'
  scope: rg
  params: {
    name: functionAppName
    location: location
    tags: tags
    serviceName: 'api'
    appServicePlanName: !empty(appServicePlanName) ? appServicePlanName : '${abbrs.webServerFarms}${resourceToken}'
    runtimeName: 'python'
    runtimeVersion: '3.13'
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    httpAlwaysReadyInstances: httpAlwaysReadyInstances
    storageAccountName: storage.outputs.name
    deploymentStorageContainerName: deploymentStorageContainerName
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    identityId: identity.outputs.resourceId
    identityClientId: identity.outputs.clientId
    useDurableTaskScheduler: useDurableTaskScheduler
    durableTaskSchedulerEndpoint: useDurableTaskScheduler ? durableTaskScheduler!.outputs.endpoint : ''
    enableEntraAuth: enableEntraAuth
    entraApiClientId: entraApiClientId
    appSettings: {
      PYTHON_ENABLE_INIT_INDEXING: '1'
      TASKHUB_NAME: taskHubName
      RESILIENT_STORAGE_PREFIX: 'resilient'
      RESILIENT_STEERABLE_CONVERSATIONS: 'true'
      RESILIENT_ENABLE_CRASH_ENDPOINT: 'false'
      RESILIENT_REPLAY_RETENTION_MINUTES: string(replayRetentionMinutes)
      AZURE_OPENAI_ENDPOINT: enableAzureOpenAI ? openAi!.outputs.endpoint : ''
      AZURE_OPENAI_DEPLOYMENT: enableAzureOpenAI ? openAi!.outputs.deploymentName : ''
    }
  }
  // The identity's data roles exist before the host first starts against storage.
  dependsOn: [
    rbac
  ]
}

// azd reads these into the environment (.azure/<env>/.env).
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output SERVICE_API_NAME string = api.outputs.name
output SERVICE_API_URI string = api.outputs.uri
output AZURE_FUNCTION_APP_NAME string = api.outputs.name
output AZURE_FUNCTION_APP_URI string = api.outputs.uri
output AZURE_STORAGE_ACCOUNT_NAME string = storage.outputs.name
output AZURE_STORAGE_BLOB_ENDPOINT string = storage.outputs.blobEndpoint
output AZURE_STORAGE_QUEUE_ENDPOINT string = storage.outputs.queueEndpoint
output AZURE_STORAGE_TABLE_ENDPOINT string = storage.outputs.tableEndpoint
output AZURE_USER_ASSIGNED_IDENTITY_CLIENT_ID string = identity.outputs.clientId
output APPLICATIONINSIGHTS_NAME string = monitoring.outputs.applicationInsightsName
output AZURE_OPENAI_ENDPOINT string = enableAzureOpenAI ? openAi!.outputs.endpoint : ''
output AZURE_OPENAI_DEPLOYMENT string = enableAzureOpenAI ? openAi!.outputs.deploymentName : ''
output ENTRA_API_SCOPE string = enableEntraAuth ? 'api://${entraApiClientId}/.default' : ''
output DURABLE_TASK_SCHEDULER_ENDPOINT string = useDurableTaskScheduler ? durableTaskScheduler!.outputs.endpoint : ''
