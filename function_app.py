"""Azure Functions entry point (Python v2 programming model).

Thin on purpose: every function is defined in ``resilient/functions`` and registered here with the agent
this app runs. To plug in your own agent, replace ``ResearchAgent`` with your class (see README).
"""

import azure.functions as func

from resilient.agents.research import ResearchAgent
from resilient.functions.durable import durable_blueprint
from resilient.functions.http import http_blueprint
from resilient.functions.maintenance import maintenance_blueprint

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(durable_blueprint(ResearchAgent))
app.register_functions(http_blueprint())
app.register_functions(maintenance_blueprint())
