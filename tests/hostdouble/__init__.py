"""Host double: plays the Azure Functions host + Durable Functions extension + Python worker locally.

See ``README.md`` here. Entry points: ``python -m tests.hostdouble`` and :class:`HostDouble`.
"""

from .api import HostDouble

__all__ = ["HostDouble"]
