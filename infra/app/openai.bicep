// Optional Azure OpenAI account (deployed only when enableAzureOpenAI is true) with one model
// deployment. Key authentication is disabled: the app calls it with its managed identity
// (Cognitive Services OpenAI User, granted in rbac.bicep).
param name string
param location string = resourceGroup().location
param tags object = {}

@description('Globally unique subdomain of the endpoint (https://<subdomain>.openai.azure.com/); required for Entra ID auth.')
param customSubDomainName string = toLower(name)

param deploymentName string
param modelName string
param modelVersion string
param deploymentSkuName string = 'GlobalStandard'
param deploymentCapacity int = 10

resource account 'Microsoft.CognitiveServices/accounts@2024-10-01' = {
  name: name
  location: location
  tags: tags
  kind: 'OpenAI'
  sku: {
    name: 'S0'
  }
  properties: {
    customSubDomainName: customSubDomainName
    disableLocalAuth: true
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      defaultAction: 'Allow'
    }
  }
}

resource modelDeployment 'Microsoft.CognitiveServices/accounts/deployments@2024-10-01' = {
  parent: account
  name: deploymentName
  sku: {
    name: deploymentSkuName
    capacity: deploymentCapacity
  }
  properties: {
    model: {
      format: 'OpenAI'
      name: modelName
      version: modelVersion
    }
  }
}

output name string = account.name
output resourceId string = account.id
output endpoint string = account.properties.endpoint
output deploymentName string = modelDeployment.name
