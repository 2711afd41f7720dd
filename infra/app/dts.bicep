// Optional Durable Task Scheduler backend (deployed only when useDurableTaskScheduler is true).
// The function app reaches it with its user-assigned identity (Durable Task Data Contributor,
// granted in rbac.bicep); api.bicep switches the Durable Functions storage provider to
// 'azureManaged' through AzureFunctionsJobHost__ app settings, so host.json can stay on Azure Storage.
param name string
param location string = resourceGroup().location
param tags object = {}

@description('Task hub name; must equal the hub name the app uses (its TASKHUB_NAME app setting, which host.json reads as hubName).')
param taskHubName string

@allowed([
  'Consumption'
  'Dedicated'
])
param skuName string = 'Consumption'

@description('Callers allowed to reach the scheduler. Must not be empty (an empty list denies everything).')
param ipAllowlist array = [
  '0.0.0.0/0'
]

resource scheduler 'Microsoft.DurableTask/schedulers@2025-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    ipAllowlist: ipAllowlist
    sku: {
      name: skuName
    }
  }
}

resource taskHub 'Microsoft.DurableTask/schedulers/taskHubs@2025-11-01' = {
  parent: scheduler
  name: taskHubName
}

output name string = scheduler.name
output resourceId string = scheduler.id
output endpoint string = scheduler.properties.endpoint
output taskHubName string = taskHub.name
