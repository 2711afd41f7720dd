"""Azure Functions entry point (Python v2 programming model). Thin by design: all logic is in resilient/."""

import azure.durable_functions as df

app = df.DFApp()
