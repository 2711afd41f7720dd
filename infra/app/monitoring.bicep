// Log Analytics workspace + workspace-based Application Insights with local (instrumentation key)
// authentication disabled: telemetry is accepted only with an Entra token, which the function app
// obtains through its user-assigned identity (APPLICATIONINSIGHTS_AUTHENTICATION_STRING in api.bicep;
// the identity holds Monitoring Metrics Publisher, granted in rbac.bicep).
param logAnalyticsName string
param applicationInsightsName string
param location string = resourceGroup().location
param tags object = {}

@minValue(30)
@maxValue(730)
param retentionInDays int = 30

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    retentionInDays: retentionInDays
    sku: {
      name: 'PerGB2018'
    }
  }
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logAnalytics.id
    IngestionMode: 'LogAnalytics'
    DisableLocalAuth: true
    publicNetworkAccessForIngestion: 'Enabled'
    publicNetworkAccessForQuery: 'Enabled'
  }
}

output logAnalyticsName string = logAnalytics.name
output logAnalyticsWorkspaceId string = logAnalytics.id
output applicationInsightsName string = applicationInsights.name
output applicationInsightsId string = applicationInsights.id
