"""Azure Functions entry point (Python v2 programming model).

Thin on purpose: every function is defined in ``resilient/functions`` and registered here with the agent
this app runs. To plug in your own agent, replace ``ResearchAgent`` with your class (see README).
"""

import azure.durable_functions as df

from resilient.agents.research import ResearchAgent
from resilient.functions.durable import durable_blueprint
from resilient.functions.http import http_blueprint
from resilient.functions.maintenance import maintenance_blueprint

app = df.DFApp()
app.register_functions(durable_blueprint(ResearchAgent))
app.register_functions(http_blueprint())
app.register_functions(maintenance_blueprint())
