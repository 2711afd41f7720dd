"""Azure Functions entry point (Python v2 programming model).

Thin on purpose: every function is defined in ``resilient/functions`` and registered here with the agent
this app runs. To plug in your own agent, replace ``ResearchAgent`` with your class (see README).
"""

import os

import azure.functions as func

from resilient.agents.research import ResearchAgent
from resilient.functions.durable import durable_blueprint
from resilient.functions.http import http_blueprint
from resilient.functions.maintenance import maintenance_blueprint

# Who checks callers of the HTTP functions: the host, by function key ("function", the default), or App
# Service Authentication (Entra ID) in front of the host ("anonymous": the host checks no key, Easy Auth has
# already refused every request without a valid token). infra/ sets it together with Easy Auth, never alone.
# Read when the worker indexes the app: a change takes effect at the next start. POST /ops/crash keeps the
# admin (master) key either way.
HTTP_AUTH_LEVELS = {"function": func.AuthLevel.FUNCTION, "anonymous": func.AuthLevel.ANONYMOUS}
_auth_level = os.environ.get("RESILIENT_HTTP_AUTH_LEVEL", "function").strip().lower() or "function"
if _auth_level not in HTTP_AUTH_LEVELS:
    raise ValueError(f"RESILIENT_HTTP_AUTH_LEVEL must be one of {sorted(HTTP_AUTH_LEVELS)}, not {_auth_level!r}")

app = func.FunctionApp(http_auth_level=HTTP_AUTH_LEVELS[_auth_level])
app.register_functions(durable_blueprint(ResearchAgent))
app.register_functions(http_blueprint())
app.register_functions(maintenance_blueprint())
