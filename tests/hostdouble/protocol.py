"""Constants shared by the host, the worker and the test API (kept import-light)."""

READY_LINE = "host double listening on http://127.0.0.1:{port}"
INSTANCE_READY_LINE = "host double instance {name} ready on http://127.0.0.1:{port}"
WORKER_READY_PREFIX = "HOSTDOUBLE_WORKER_READY "
FUNCTION_HEADER = "x-hostdouble-function"
ROUTE_PARAMS_HEADER = "x-hostdouble-route-params"
BINDINGS_HEADER = "x-hostdouble-bindings"
INVOCATION_HEADER = "x-ms-invocation-id"
DURABLE_PREFIX = "runtime/webhooks/durabletask/"
KILL_HEADER = "x-hostdouble-kill-after"  # the worker SIGKILLs itself this many seconds into the invocation
RECYCLE_EXIT_CODE = 75  # the host stopped itself (restart limit): the platform starts a fresh one
STARTUP_FAILED_EXIT_CODE = 3  # the host never became ready: the platform gives up, like `func start` would
INSTANCE_SETTING = "HOSTDOUBLE_INSTANCE"  # set by the platform for each of several instances (its name)
INSTANCE_HEADER = "x-hostdouble-instance"  # a request for the front end to send to that instance
