// Data-plane role assignments for the function app's user-assigned identity and, optionally, for the
// deploying user (principalId), so a local run with DefaultAzureCredential against the cloud account
// has the same access as the app. Nothing here grants key access: the storage account and the
// Azure OpenAI account have local (key) authentication disabled.
param storageAccountName string
param appInsightsName string

@description('Principal (object) id of the function app\'s user-assigned identity.')
param managedIdentityPrincipalId string

@description('Object id of the deploying user / CI principal. Empty = no assignments for it.')
param userPrincipalId string = ''

@allowed([
  'User'
  'ServicePrincipal'
])
param userPrincipalType string = 'User'

param enableOpenAi bool = false
@description('Name of the Azure OpenAI account (used only when enableOpenAi is true).')
param openAiAccountName string = 'unused'

param enableDurableTaskScheduler bool = false
@description('Name of the Durable Task Scheduler (used only when enableDurableTaskScheduler is true).')
param durableTaskSchedulerName string = 'unused'

// Built-in role definition ids (identical in every tenant).
var roleIds = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
  cognitiveServicesOpenAiUser: '5e0bd9bd-7b93-4f28-af87-19fc36ad61bd'
  durableTaskDataContributor: '0ad04412-c4d5-4796-b79c-f76d14c8d402'
}

// Blob: Flex deployment package, host leases, Durable Functions large payloads, the app's append
// blobs. Queue: Durable Functions control/work-item queues. Table: Durable Functions history and
// instances, the app's tables.
var storageRoleIds = [
  roleIds.storageBlobDataOwner
  roleIds.storageQueueDataContributor
  roleIds.storageTableDataContributor
]

var assignUser = !empty(userPrincipalId)

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource openAi 'Microsoft.CognitiveServices/accounts@2024-10-01' existing = {
  name: openAiAccountName
}

resource scheduler 'Microsoft.DurableTask/schedulers@2025-11-01' existing = {
  name: durableTaskSchedulerName
}

// --- Storage -----------------------------------------------------------------------------------

resource storageRolesApp 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in storageRoleIds: {
  name: guid(storage.id, managedIdentityPrincipalId, roleId)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: managedIdentityPrincipalId
    principalType: 'ServicePrincipal'
  }
}]

resource storageRolesUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in (assignUser ? storageRoleIds : []): {
  name: guid(storage.id, userPrincipalId, roleId)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}]

// --- Application Insights (Entra-authenticated telemetry ingestion) ---------------------------------

resource monitoringRoleApp 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(applicationInsights.id, managedIdentityPrincipalId, roleIds.monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleIds.monitoringMetricsPublisher)
    principalId: managedIdentityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource monitoringRoleUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (assignUser) {
  name: guid(applicationInsights.id, userPrincipalId, roleIds.monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleIds.monitoringMetricsPublisher)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

// --- Azure OpenAI (optional) ---------------------------------------------------------------------

resource openAiRoleApp 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (enableOpenAi) {
  name: guid(openAi.id, managedIdentityPrincipalId, roleIds.cognitiveServicesOpenAiUser)
  scope: openAi
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleIds.cognitiveServicesOpenAiUser)
    principalId: managedIdentityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource openAiRoleUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (enableOpenAi && assignUser) {
  name: guid(openAi.id, userPrincipalId, roleIds.cognitiveServicesOpenAiUser)
  scope: openAi
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleIds.cognitiveServicesOpenAiUser)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

// --- Durable Task Scheduler (optional) -----------------------------------------------------------

resource schedulerRoleApp 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (enableDurableTaskScheduler) {
  name: guid(scheduler.id, managedIdentityPrincipalId, roleIds.durableTaskDataContributor)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleIds.durableTaskDataContributor)
    principalId: managedIdentityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource schedulerRoleUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (enableDurableTaskScheduler && assignUser) {
  name: guid(scheduler.id, userPrincipalId, roleIds.durableTaskDataContributor)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleIds.durableTaskDataContributor)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}
