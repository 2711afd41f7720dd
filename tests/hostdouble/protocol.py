"""Constants shared by the host, the worker and the test API (kept import-light)."""

READY_LINE = "host double listening on http://127.0.0.1:{port}"
WORKER_READY_PREFIX = "HOSTDOUBLE_WORKER_READY "
FUNCTION_HEADER = "x-hostdouble-function"
ROUTE_PARAMS_HEADER = "x-hostdouble-route-params"
BINDINGS_HEADER = "x-hostdouble-bindings"
INVOCATION_HEADER = "x-ms-invocation-id"
DURABLE_PREFIX = "runtime/webhooks/durabletask/"
