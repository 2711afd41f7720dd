// Storage account used both by the Functions host (AzureWebJobsStorage: Durable Functions queues,
// tables, leases; the Flex deployment package container) and by the app itself (Table storage and
// append blobs under the RESILIENT_STORAGE_PREFIX names). Identity-only: shared keys are disabled,
// so no connection string with an account key can work against it.
param name string
param location string = resourceGroup().location
param tags object = {}

@description('Blob container that receives the Flex Consumption deployment package.')
param deploymentContainerName string

@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_RAGRS'
])
param skuName string = 'Standard_LRS'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: 'Enabled'
    dnsEndpointType: 'Standard'
    networkAcls: {
      defaultAction: 'Allow'
      bypass: 'AzureServices'
    }
  }

  resource blobService 'blobServices' = {
    name: 'default'

    resource deploymentContainer 'containers' = {
      name: deploymentContainerName
      properties: {
        publicAccess: 'None'
      }
    }
  }

  resource queueService 'queueServices' = {
    name: 'default'
  }

  resource tableService 'tableServices' = {
    name: 'default'
  }
}

output name string = storage.name
output resourceId string = storage.id
output blobEndpoint string = storage.properties.primaryEndpoints.blob
output queueEndpoint string = storage.properties.primaryEndpoints.queue
output tableEndpoint string = storage.properties.primaryEndpoints.table
output deploymentContainerName string = storage::blobService::deploymentContainer.name
