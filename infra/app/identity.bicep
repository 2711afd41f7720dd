// User-assigned managed identity of the function app. All data-plane access (storage, App Insights,
// Azure OpenAI, Durable Task Scheduler) goes through it; the roles are granted in rbac.bicep.
param name string
param location string = resourceGroup().location
param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output name string = identity.name
output resourceId string = identity.id
output principalId string = identity.properties.principalId
output clientId string = identity.properties.clientId
