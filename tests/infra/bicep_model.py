"""A small read-only model of Bicep files, built on the tree-sitter-bicep grammar.

No Bicep compiler can run here, so the infra tests parse every template with a real Bicep grammar
and read the security-relevant values out of the parse tree: literals become Python values, anything
else stays an :class:`Expr` (its source text and node) that the tests can resolve a little further
(identifiers to params/vars, ``union()`` / ternaries to the union of their object branches).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import tree_sitter_bicep
from tree_sitter import Language, Node, Parser

_LANGUAGE = Language(tree_sitter_bicep.language())
_PARSER = Parser(_LANGUAGE)


@dataclass(frozen=True)
class Expr:
    """A non-literal expression: kept as its node (for resolving) and its source text."""

    node: Node = field(compare=False, repr=False)
    text: str

    @property
    def kind(self) -> str:
        return self.node.type


class Interp(Expr):
    """An interpolated string ('a${b}c')."""


def syntax_errors(node: Node) -> list[str]:
    """ERROR and MISSING nodes, as 'line:col type text' (1-based lines)."""
    found: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            found.append(f"{n.start_point[0] + 1}:{n.start_point[1] + 1} {n.type} {_text(n)[:60]!r}")
        stack.extend(n.children)
    return sorted(found)


def _text(node: Node) -> str:
    return (node.text or b"").decode()


def walk(node: Node) -> Iterator[Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def string_value(node: Node) -> str | Interp:
    """A string node's value; escape sequences decoded; Interp if it has ${...} parts."""
    parts: list[str] = []
    for child in node.named_children:
        if child.type == "interpolation":
            return Interp(node, _text(node))
        if child.type == "escape_sequence":
            esc = _text(child)
            parts.append({"\\n": "\n", "\\r": "\r", "\\t": "\t", "\\$": "$"}.get(esc, esc[1:]))
        else:
            parts.append(_text(child))
    return "".join(parts)


def value(node: Node) -> Any:
    """Python value of a literal node (objects -> dict, arrays -> list); otherwise an Expr."""
    match node.type:
        case "string":
            return string_value(node)
        case "multiline_string":
            return _text(node)[3:-3]
        case "boolean":
            return _text(node) == "true"
        case "number":
            return int(_text(node))
        case "null":
            return None
        case "array":
            return [value(c) for c in node.named_children if c.type != "comment"]
        case "object":
            return {k: value(v) for k, v in object_items(node)}
        case _:
            return Expr(node, _text(node))


def object_items(node: Node) -> Iterator[tuple[str, Node]]:
    """(key, value node) of an object literal; nested resource declarations are skipped."""
    for prop in node.named_children:
        if prop.type != "object_property":
            continue
        named = [c for c in prop.named_children if c.type != "comment"]
        if len(named) != 2:  # e.g. a nested resource declaration
            continue
        key_node, value_node = named
        key = string_value(key_node) if key_node.type == "string" else _text(key_node)
        yield (key.text if isinstance(key, Interp) else key), value_node


@dataclass
class Declaration:
    kind: str  # param | var | output | resource | module
    name: str
    node: Node
    decorators: list[Node]
    type_text: str = ""  # param/output type; resource type@api; module path
    value_node: Node | None = None  # param default, var/output value
    body: Node | None = None  # resource/module object
    condition: Node | None = None  # `if (...)` of a resource/module
    loop: tuple[str, Node] | None = None  # (item name, iterable) of a `[for ...]`
    existing: bool = False
    parent: Declaration | None = None  # for nested resources

    @property
    def full_type(self) -> str:
        """Resource type without api version; nested resources get their parent's prefix."""
        rtype = self.type_text.split("@", 1)[0]
        if self.parent is not None and "/" not in rtype:
            return f"{self.parent.full_type}/{rtype}"
        return rtype

    @property
    def default(self) -> Any:
        return None if self.value_node is None else value(self.value_node)

    @property
    def props(self) -> dict[str, Any]:
        return {} if self.body is None else value(self.body)

    def decorator_names(self) -> list[str]:
        names = []
        for dec in self.decorators:
            call = next((c for c in dec.named_children if c.type == "call_expression"), None)
            if call is not None and call.named_children:
                names.append(_text(call.named_children[0]))
        return names


class BicepFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.source = path.read_bytes()
        self.tree = _PARSER.parse(self.source)
        self.root = self.tree.root_node
        self.errors = syntax_errors(self.root)
        self.target_scope: str | None = None
        self.declarations: list[Declaration] = []
        self._collect()

    # -- collection -------------------------------------------------------------------------

    def _collect(self) -> None:
        pending: list[Node] = []
        for child in self.root.named_children:
            if child.type == "decorators":
                pending.extend(c for c in child.named_children if c.type == "decorator")
                continue
            if child.type == "target_scope_assignment":
                s = next(c for c in child.named_children if c.type == "string")
                scope = string_value(s)
                self.target_scope = scope if isinstance(scope, str) else scope.text
            decl = self._declaration(child, pending, parent=None)
            if decl is not None:
                self.declarations.append(decl)
                if decl.kind == "resource":
                    self._collect_nested(decl)
            if child.type != "comment":
                pending = []

    def _collect_nested(self, parent: Declaration) -> None:
        if parent.body is None:
            return
        for prop in parent.body.named_children:
            if prop.type != "object_property":
                continue
            for c in prop.named_children:
                if c.type == "resource_declaration":
                    nested = self._declaration(c, [], parent=parent)
                    assert nested is not None
                    self.declarations.append(nested)
                    self._collect_nested(nested)

    def _declaration(
        self, node: Node, decorators: list[Node], parent: Declaration | None
    ) -> Declaration | None:
        kinds = {
            "parameter_declaration": "param",
            "variable_declaration": "var",
            "output_declaration": "output",
            "resource_declaration": "resource",
            "module_declaration": "module",
        }
        if node.type not in kinds:
            return None
        kind = kinds[node.type]
        named = [c for c in node.named_children if c.type != "comment"]
        decl = Declaration(kind, _text(named[0]), node, list(decorators), parent=parent)
        if kind in ("param", "output"):
            type_node = next((c for c in named[1:] if c.type == "type"), None)
            decl.type_text = "" if type_node is None else _text(type_node)
            rest = [c for c in named[1:] if c.type != "type"]
            decl.value_node = rest[-1] if rest else None
        elif kind == "var":
            decl.value_node = named[-1]
        else:
            type_str = string_value(named[1])
            decl.type_text = type_str if isinstance(type_str, str) else type_str.text
            decl.existing = any(c.type == "existing" for c in node.children)
            self._body(decl, named[-1])
        return decl

    @staticmethod
    def _body(decl: Declaration, node: Node) -> None:
        if node.type == "for_statement":
            parts = [c for c in node.named_children if c.type != "comment"]
            decl.loop = (_text(parts[0]), parts[1])
            node = parts[-1]
        if node.type == "if_statement":
            parts = [c for c in node.named_children if c.type != "comment"]
            decl.condition = parts[0]
            node = parts[-1]
        decl.body = node if node.type == "object" else None

    # -- queries ----------------------------------------------------------------------------

    def of_kind(self, kind: str) -> dict[str, Declaration]:
        return {d.name: d for d in self.declarations if d.kind == kind and d.parent is None}

    @property
    def params(self) -> dict[str, Declaration]:
        return self.of_kind("param")

    @property
    def variables(self) -> dict[str, Declaration]:
        return self.of_kind("var")

    @property
    def outputs(self) -> dict[str, Declaration]:
        return self.of_kind("output")

    @property
    def modules(self) -> dict[str, Declaration]:
        return self.of_kind("module")

    def resources(self, full_type: str | None = None, *, existing: bool | None = False) -> list[Declaration]:
        return [
            d
            for d in self.declarations
            if d.kind == "resource"
            and (full_type is None or d.full_type.lower() == full_type.lower())
            and (existing is None or d.existing == existing)
        ]

    def calls(self) -> Iterator[tuple[str, Node]]:
        """(function name, call node) of every call, including method calls like `x.listKeys()`."""
        for n in walk(self.root):
            if n.type == "call_expression" and n.named_children:
                fn = n.named_children[0]
                if fn.type == "member_expression":
                    fn = fn.named_children[-1]
                yield _text(fn), n

    def strings(self) -> Iterator[str]:
        """Every string literal's text (interpolated ones in full)."""
        for n in walk(self.root):
            if n.type in ("string", "multiline_string"):
                yield _text(n)

    # -- resolution -------------------------------------------------------------------------

    def resolve(self, v: Any, *, depth: int = 0) -> Any:
        """Follow identifiers to param defaults / var values; one step at a time, until a literal."""
        seen = 0
        while isinstance(v, Expr) and not isinstance(v, Interp) and v.kind == "identifier" and seen < 20:
            decl = self.params.get(v.text) or self.variables.get(v.text)
            if decl is None or decl.value_node is None:
                return v
            v = value(decl.value_node)
            seen += 1
        if isinstance(v, Expr) and v.kind == "parenthesized_expression" and depth < 20:
            return self.resolve(value(v.node.named_children[0]), depth=depth + 1)
        return v

    def possible_object(self, v: Any, *, depth: int = 0) -> dict[str, Any]:
        """All keys an object-valued expression may have: union() merges, ternaries merge both arms."""
        if depth > 20:
            raise RecursionError("object expression too deep")
        v = self.resolve(v)
        if isinstance(v, dict):
            return v
        if isinstance(v, Expr):
            node = v.node
            if node.type == "call_expression" and _text(node.named_children[0]) == "union":
                merged: dict[str, Any] = {}
                args = next(c for c in node.named_children if c.type == "arguments")
                for arg in args.named_children:
                    merged.update(self.possible_object(value(arg), depth=depth + 1))
                return merged
            if node.type == "ternary_expression":
                _, yes, no = node.named_children
                merged = dict(self.possible_object(value(no), depth=depth + 1))
                merged.update(self.possible_object(value(yes), depth=depth + 1))
                return merged
        raise TypeError(f"{self.path.name}: cannot see the keys of {v!r}")

    def possible_strings(self, v: Any, *, depth: int = 0) -> set[str]:
        """String literals an expression may evaluate to (identifiers, `a.b` of var objects,
        ternaries, arrays and loop iterables followed)."""
        if depth > 20:
            raise RecursionError("string expression too deep")
        v = self.resolve(v)
        if isinstance(v, str):
            return {v}
        if isinstance(v, list):
            return set().union(*(self.possible_strings(x, depth=depth + 1) for x in v)) if v else set()
        if isinstance(v, Expr) and not isinstance(v, Interp):
            node = v.node
            if node.type == "member_expression":
                obj, prop = node.named_children[0], node.named_children[-1]
                base = self.resolve(value(obj))
                if isinstance(base, dict) and _text(prop) in base:
                    return self.possible_strings(base[_text(prop)], depth=depth + 1)
            if node.type == "ternary_expression":
                _, yes, no = node.named_children
                return self.possible_strings(value(yes), depth=depth + 1) | self.possible_strings(
                    value(no), depth=depth + 1
                )
        return set()


@cache
def load(path: Path) -> BicepFile:
    return BicepFile(path)
