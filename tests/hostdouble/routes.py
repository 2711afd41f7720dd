"""Functions HTTP route templates (ASP.NET Core syntax) → matchers, as the Functions host applies them.

Supported: literal segments (case-insensitive), ``{name}``, ``{name?}`` (optional, last segments only),
``{name:int}``/``long``/``bool``/``guid``/``alpha``/``float``/``double``/``decimal``/``regex(...)``
constraints (other constraints accept any segment), ``{name=default}``, ``{*rest}``/``{**rest}`` catch-all,
and segments mixing literals and parameters (``{a}.{b}``). A route starting with ``admin`` is rejected
like the real host does ("The specified route conflicts with one or more built in routes.").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# ASCII digits only: in a Python ``str`` pattern ``\d`` also matches "５" or "٥", which .NET's invariant-culture
# parsing behind these constraints does not accept.
_CONSTRAINTS = {
    "int": r"-?[0-9]+",
    "long": r"-?[0-9]+",
    "bool": r"(?i:true|false)",
    "guid": r"[0-9A-Fa-f]{8}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{12}",
    "alpha": r"[A-Za-z]+",
    "float": r"-?[0-9]+(?:\.[0-9]+)?",
    "double": r"-?[0-9]+(?:\.[0-9]+)?",
    "decimal": r"-?[0-9]+(?:\.[0-9]+)?",
}
_PARAM = re.compile(r"\{([^{}]+)\}")
RESERVED_ROUTE_ERROR = "The specified route conflicts with one or more built in routes."


class RouteError(ValueError):
    """The route template cannot be registered (the real host puts the function in an error state)."""


@dataclass
class _Param:
    name: str
    pattern: str
    optional: bool
    catch_all: bool
    default: str | None


def _parse_param(body: str) -> _Param:
    catch_all = body.startswith("*")
    body = body.lstrip("*")
    default = None
    if "=" in body:
        body, default = body.split("=", 1)
    optional = body.endswith("?")
    body = body.rstrip("?")
    name, *constraints = _split_constraints(body)
    pattern = r".*" if catch_all else r"[^/]+"
    for constraint in constraints:
        if constraint.startswith("regex(") and constraint.endswith(")"):
            pattern = f"(?:{constraint[6:-1]})"
        elif constraint in _CONSTRAINTS:
            pattern = _CONSTRAINTS[constraint]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise RouteError(f"invalid route parameter name {name!r}")
    return _Param(name, pattern, optional or default is not None, catch_all, default)


def _split_constraints(body: str) -> list[str]:
    """``name:c1:regex(a:b)`` → ``[name, c1, regex(a:b)]`` (colons inside parentheses kept)."""
    parts, depth, current = [], 0, ""
    for char in body:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == ":" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


@dataclass
class RouteTemplate:
    """One compiled route: ``match(path)`` → route params (strings) or ``None``."""

    template: str
    regex: re.Pattern[str]
    defaults: dict[str, str] = field(default_factory=dict)
    precedence: tuple[int, ...] = ()

    def match(self, path: str) -> dict[str, str] | None:
        """``path`` is the request path already percent-decoded once (as the host receives it); it is not
        decoded again (``%2541`` arrives as ``%41`` and stays that). ``fullmatch``: a trailing line break
        is part of the last segment, never ignored the way ``$`` ignores it."""
        found = self.regex.fullmatch("/" + path.strip("/") if path.strip("/") else "")
        if found is None:
            return None
        params = dict(self.defaults)
        for key, value in found.groupdict().items():
            if value is not None:
                params[key] = value
        return params


def compile_route(template: str) -> RouteTemplate:
    """Compile a Functions route template (without the route prefix)."""
    clean = template.strip().strip("/")
    if clean.lower().startswith("admin"):
        raise RouteError(RESERVED_ROUTE_ERROR)
    if not clean:
        return RouteTemplate(template, re.compile(r""), {}, ())
    pieces: list[str] = []
    precedence: list[int] = []
    defaults: dict[str, str] = {}
    segments = clean.split("/")
    for index, segment in enumerate(segments):
        whole = _PARAM.fullmatch(segment)
        if whole:
            param = _parse_param(whole.group(1))
            if param.default is not None:
                defaults[param.name] = param.default
            group = f"(?P<{param.name}>{param.pattern})"
            if param.catch_all or param.optional:
                if index != len(segments) - 1 and not param.catch_all:
                    raise RouteError(f"optional parameter {param.name!r} must be the last segment")
                pieces.append(f"(?:/{group})?")
                precedence.append(5 if param.catch_all else 4)
            else:
                pieces.append("/" + group)
                precedence.append(3 if param.pattern == r"[^/]+" else 2)
            continue
        regex, position, has_param = "", 0, False
        for found in _PARAM.finditer(segment):
            regex += re.escape(segment[position:found.start()])
            param = _parse_param(found.group(1))
            regex += f"(?P<{param.name}>{param.pattern.replace('[^/]+', '[^/]+?')})"
            position, has_param = found.end(), True
        regex += re.escape(segment[position:])
        # ASCII case folding only: under full Unicode folding "reſponses" (long s) would match "responses".
        pieces.append("/" + f"(?ai:{regex})" if not has_param else "/" + regex)
        precedence.append(1 if has_param else 0)
    return RouteTemplate(template, re.compile("".join(pieces)), defaults, tuple(precedence))


@dataclass
class HttpRoute:
    function: str
    route: RouteTemplate
    methods: frozenset[str] | None


class Router:
    """Routes a request path (after the route prefix) and method to a function, most specific first."""

    def __init__(self) -> None:
        self.routes: list[HttpRoute] = []

    def add(self, function: str, template: str, methods: list[str] | None) -> None:
        upper = frozenset(m.upper() for m in methods) if methods else None
        self.routes.append(HttpRoute(function, compile_route(template), upper))
        self.routes.sort(key=lambda r: (*r.route.precedence, 9))

    def match(self, path: str, method: str) -> tuple[str, dict[str, str]] | None:
        for candidate in self.routes:
            if candidate.methods is not None and method.upper() not in candidate.methods:
                continue
            params = candidate.route.match(path)
            if params is not None:
                return candidate.function, params
        return None
