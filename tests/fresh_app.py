"""Import ``function_app`` afresh.

``FunctionApp.get_functions()`` builds the function list once per app object (a second call on the same
object reports duplicate names), and several test modules ask for it, as the worker does once at start-up.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any


def fresh_app() -> Any:
    sys.modules.pop("function_app", None)
    return importlib.import_module("function_app").app
