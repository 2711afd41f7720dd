"""Azure Functions entry point (Python v2 programming model).

Thin on purpose: every function is defined in ``resilient/functions`` and registered here with the agent
this app runs. Which agent: the app setting ``RESILIENT_AGENT="module:callable"`` (an Agent Framework agent
or workflow, or an agent written to ``resilient.agents.base``); unset, the offline sample (see README).
Who may call: ``RESILIENT_HTTP_AUTH_LEVEL`` (function keys, or Entra ID in front; see README).
"""

import azure.functions as func

from resilient.agents.loader import configured_agent
from resilient.functions.auth_level import http_auth_level
from resilient.functions.durable import durable_blueprint
from resilient.functions.http import http_blueprint
from resilient.functions.maintenance import maintenance_blueprint
from resilient.functions.runtime import ProcessRuntime

process = ProcessRuntime(configured_agent)  # what this process's functions share (one worker per event loop)
app = func.FunctionApp(http_auth_level=http_auth_level())
app.register_functions(durable_blueprint(process))
app.register_functions(http_blueprint(process))
app.register_functions(maintenance_blueprint(process))
