// Flex Consumption (FC1) plan + Python function app. The runtime (python 3.13) is declared in
// functionAppConfig, so FUNCTIONS_WORKER_RUNTIME / FUNCTIONS_EXTENSION_VERSION are NOT app settings
// (Flex Consumption rejects them). Every connection is identity-based through the user-assigned
// identity: no account keys, no key-bearing connection strings.
param name string
param location string = resourceGroup().location
param tags object = {}

@description('azd service name; becomes the azd-service-name tag azd deploys to.')
param serviceName string = 'api'

param appServicePlanName string

@allowed([
  'python'
])
param runtimeName string = 'python'
param runtimeVersion string = '3.13'

@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 100

@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

// HTTP requests one instance takes at once before Flex Consumption adds an instance. Without it the
// platform's default for Python applies: one request per instance, so every open SSE stream (a streamed
// response, or a reader following one) would hold a whole instance. What it counts is open invocations, and
// an open SSE stream is mostly an idle invocation waiting for its next event: the worker serves HTTP with an
// async server (FastAPI/uvicorn through the HTTP-streaming extension), so a waiting stream costs no thread.
// Measured with bench/stream_capacity.py --mode held (one worker; N slow streams held open, one event a
// second each, while short streamed creates and reconnects are timed): with 100 streams held open a new
// stream's median first event stayed within 1.4x of an idle worker's and the held streams' events kept their
// 1 s pace (p95 gap under 1.03 s); at 200 it was 1.4-2.3x, at 300 7.7x; worker RSS 113-119 MB at 100 (94
// idle). A high rate of creates and phases is limited by storage round trips and the Durable group's
// instances, not by how many streams an HTTP instance holds (docs/PERFORMANCE.md, "Instances for N
// concurrent streams"). At 100, maximumInstanceCount (100) caps the app at 10,000 open streams.
@minValue(1)
@maxValue(1000)
param httpPerInstanceConcurrency int = 100

// Always-ready instances for the HTTP group: kept warm and billed while idle, so the first request after a
// quiet spell does not wait for a cold start (about a second here plus the platform's allocation). 0 = none.
@minValue(0)
@maxValue(100)
param httpAlwaysReadyInstances int = 0

param storageAccountName string
param deploymentStorageContainerName string
param applicationInsightsName string

@description('Resource id of the user-assigned identity the app runs as.')
param identityId string

@description('Client id of that identity (AzureWebJobsStorage__clientId, AZURE_CLIENT_ID, App Insights auth).')
param identityClientId string

@description('Switch the Durable Functions backend to the Durable Task Scheduler at durableTaskSchedulerEndpoint.')
param useDurableTaskScheduler bool = false
param durableTaskSchedulerEndpoint string = ''

@description('Application-specific settings (RESILIENT_*, AZURE_OPENAI_*, ...), merged over the base settings below.')
param appSettings object = {}

@description('Put App Service Authentication (Easy Auth, Entra ID) in front of the app: every request needs a bearer token for entraApiClientId, and the HTTP functions stop asking for function keys.')
param enableEntraAuth bool = false

@description('Application (client) id of the app registration that clients get tokens for (api://<id>/.default). Required when enableEntraAuth is true.')
param entraApiClientId string = ''

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource appServicePlan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: appServicePlanName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

// Host storage (AzureWebJobsStorage) via identity: the Functions host, the Durable Functions
// Azure Storage backend and the app's own storage clients all read these.
var storageSettings = {
  AzureWebJobsStorage__credential: 'managedidentity'
  AzureWebJobsStorage__clientId: identityClientId
  AzureWebJobsStorage__accountName: storage.name
  AzureWebJobsStorage__blobServiceUri: storage.properties.primaryEndpoints.blob
  AzureWebJobsStorage__queueServiceUri: storage.properties.primaryEndpoints.queue
  AzureWebJobsStorage__tableServiceUri: storage.properties.primaryEndpoints.table
}

var baseSettings = {
  // The connection string of a local-auth-disabled App Insights carries no secret that works on
  // its own; ingestion is authorised by the Entra token named in the authentication string.
  APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsights.properties.ConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
  // DefaultAzureCredential / ManagedIdentityCredential in app code pick the user-assigned identity.
  AZURE_CLIENT_ID: identityClientId
}

// Optional Durable Task Scheduler backend: override host.json's durableTask storage provider
// through AzureFunctionsJobHost__ settings instead of editing host.json.
var durableTaskSchedulerSettings = useDurableTaskScheduler ? {
  DURABLE_TASK_SCHEDULER_CONNECTION_STRING: 'Endpoint=${durableTaskSchedulerEndpoint};Authentication=ManagedIdentity;ClientID=${identityClientId}'
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__type: 'azureManaged'
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionStringName: 'DURABLE_TASK_SCHEDULER_CONNECTION_STRING'
} : {}

// Who checks callers (read by function_app.py): the host by function key, or Easy Auth alone when it is
// on (the host would otherwise also demand a key). Last in the union, so appSettings cannot open the app.
var httpAuthSettings = {
  RESILIENT_HTTP_AUTH_LEVEL: enableEntraAuth ? 'anonymous' : 'function'
}

var allSettings = union(appSettings, durableTaskSchedulerSettings, storageSettings, baseSettings, httpAuthSettings)

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  name: name
  location: location
  tags: union(tags, {
    'azd-service-name': serviceName
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: appServicePlan.id
    httpsOnly: true
    clientCertEnabled: false
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      ftpsState: 'Disabled'
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentStorageContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        alwaysReady: httpAlwaysReadyInstances > 0 ? [
          {
            name: 'http'
            instanceCount: httpAlwaysReadyInstances
          }
        ] : []
        triggers: {
          http: {
            perInstanceConcurrency: httpPerInstanceConcurrency
          }
        }
      }
      runtime: {
        name: runtimeName
        version: runtimeVersion
      }
    }
  }

  resource appSettingsConfig 'config' = {
    name: 'appsettings'
    properties: allSettings
  }
}

// Basic (user/password) publishing credentials off: deployments go through Entra ID only.
resource ftpPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'scm'
  properties: {
    allow: false
  }
}

// Optional Entra ID authentication. API only: bearer tokens are validated (issuer, audience, signature)
// and requests without one get 401; no login flow, no token store, so no client secret.
resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = if (enableEntraAuth) {
  parent: functionApp
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      unauthenticatedClientAction: 'Return401'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: entraApiClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            entraApiClientId
            'api://${entraApiClientId}'
          ]
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}

output name string = functionApp.name
output resourceId string = functionApp.id
output defaultHostName string = functionApp.properties.defaultHostName
output uri string = 'https://${functionApp.properties.defaultHostName}'
