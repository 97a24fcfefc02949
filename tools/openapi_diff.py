"""Which changes from one OpenAPI document to the next can break a client of the first.

Each breaking change is one line, `where: what`. A schema of components.schemas is named once,
`schema JobPublic (response)`, however many operations use it, so one change is one line. Which
changes break depends on who writes the value: a client reads responses (a removed or newly
optional property, a new type, enum value or variant breaks it) and writes requests (a new
required property or parameter, a narrower type, a removed enum value or variant, a property
gone from an object that refuses unknown ones breaks it). A component that any request uses is
judged as a request: where a response echoes it (a job's spec), it holds what the client sent;
but a named enum that responses use too (JobStatus) is judged both ways.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
REF_PREFIX = "#/components/schemas/"
REF = re.compile(r'"\$ref": "#/components/schemas/([^"]+)"')

Schema = dict[str, Any]


@dataclass
class Comparison:
    """Two documents, the old one as clients know it, and the breaking changes found so far."""

    old: Schema
    new: Schema
    requests: set[str] = field(default_factory=set)  # components an old request uses
    responses: set[str] = field(default_factory=set)  # components an old response uses
    seen: set[str] = field(default_factory=set)
    found: list[str] = field(default_factory=list)

    def flag(self, where: str, what: str) -> None:
        line = f"{where}: {what}"
        if line not in self.found:
            self.found.append(line)


@dataclass(frozen=True)
class At:
    """Where a value is: the line's `where`, the field path inside it, and who writes it."""

    where: str
    path: str
    request: bool  # the client writes it (a request body or parameter), else reads it

    def field(self, name: str) -> At:
        """A property (`name`), the items (`[]`) or the values (`{}`) of this value."""
        dot = "." if self.path and name[0] not in "[{" else ""
        return replace(self, path=f"{self.path}{dot}{name}")

    def of(self, what: str) -> str:
        return f"{what} of {self.path}" if self.path else what


def _operations(document: Schema) -> dict[str, Schema]:
    return {
        f"{method.upper()} {path}": operation
        for path, item in document.get("paths", {}).items()
        for method, operation in item.items()
        if method in METHODS
    }


def _ref(schema: Schema) -> str | None:
    ref = schema.get("$ref", "")
    return ref[len(REF_PREFIX) :] if ref.startswith(REF_PREFIX) else None


def _resolve(document: Schema, schema: Schema) -> Schema:
    name = _ref(schema)
    return document.get("components", {}).get("schemas", {}).get(name, {}) if name else schema


def _options(schema: Schema) -> list[Schema]:
    """A union's options (anyOf, oneOf, allOf), or the schema itself."""
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return [o for option in schema[key] for o in _options(option)]
    return [schema]


def _types(document: Schema, schema: Schema, shared: set[str], depth: int = 0) -> set[str] | None:
    """The JSON types a value may have, None for any. A reference both documents hold stands
    for itself (its own changes are its component's lines); any other is looked into."""
    found: set[str] = set()
    for option in _options(schema):
        name = _ref(option)
        if name in shared:
            found.add(str(name))
        elif name and depth < 8:
            inner = _types(document, _resolve(document, option), shared, depth + 1)
            if inner is None:
                return None
            found |= inner
        elif "type" in option:
            kind = option["type"]
            found |= set(kind) if isinstance(kind, list) else {kind}
        elif "properties" in option:
            found.add("object")
        else:
            return None
    return found


def _enum(document: Schema, schema: Schema, shared: set[str]) -> set[str] | None:
    """The values allowed (enum and const, as JSON), None where any value of the type is."""
    values: set[str] = set()
    for option in _options(schema):
        name = _ref(option)
        if name in shared:
            values.add(f"<{name}>")
            continue
        option = _resolve(document, option)
        if option.get("type") == "null":
            continue
        if "enum" in option:
            values |= {json.dumps(v) for v in option["enum"]}
        elif "const" in option:
            values.add(json.dumps(option["const"]))
        else:
            return None
    return values


def _formats(schema: Schema) -> set[str]:
    return {str(option["format"]) for option in _options(schema) if "format" in option}


def _variants(schema: Schema) -> set[str]:
    return {name for option in _options(schema) if (name := _ref(option))}


def _names(values: set[str] | None) -> str:
    return "any" if values is None else ", ".join(sorted(values)) or "none"


def compare_values(c: Comparison, old: Schema, new: Schema, at: At) -> None:
    """Type, format, enum and union changes of one value, then its parts."""
    old_variants, new_variants = _variants(old), _variants(new)
    shared = old_variants & new_variants
    old_types, new_types = _types(c.old, old, shared), _types(c.new, new, shared)
    narrowed = new_types is not None and (old_types is None or bool(old_types - new_types))
    widened = old_types is not None and (new_types is None or bool(new_types - old_types))
    if narrowed if at.request else widened:
        c.flag(at.where, f"{at.of('type')} changed: {_names(old_types)} -> {_names(new_types)}")
    if _formats(old) != _formats(new):
        formats = f"{_names(_formats(old))} -> {_names(_formats(new))}"
        c.flag(at.where, f"{at.of('format')} changed: {formats}")
    _compare_enums(c, _enum(c.old, old, shared), _enum(c.new, new, shared), at)
    gone = old_variants - new_variants if at.request else new_variants - old_variants
    renamed = len(old_variants) == len(new_variants) == 1
    if gone and old_variants and new_variants and not renamed:
        change = "removed variants" if at.request else "new variants"
        c.flag(at.where, f"{at.of(change)}: {_names(gone)}")
    _compare_parts(c, old, new, at)


def _compare_enums(c: Comparison, old: set[str] | None, new: set[str] | None, at: At) -> None:
    if old is not None and new is not None:
        if old - new:
            c.flag(at.where, f"{at.of('removed values')}: {_names(old - new)}")
        if new - old and not at.request:
            c.flag(at.where, f"{at.of('new values')}: {_names(new - old)}")
    elif at.request and new is not None:
        c.flag(at.where, f"{at.of('values')} restricted to: {_names(new)}")
    elif not at.request and old is not None:
        c.flag(at.where, f"{at.of('values')} no longer restricted")


def _compare_parts(c: Comparison, old: Schema, new: Schema, at: At) -> None:
    """Each referenced schema both sides hold, the object's properties, items and values."""
    old_refs, new_refs = _variants(old), _variants(new)
    pairs = [(name, name) for name in sorted(old_refs & new_refs)]
    if len(old_refs) == len(new_refs) == 1 and old_refs != new_refs:  # renamed
        pairs = [(next(iter(old_refs)), next(iter(new_refs)))]
    for old_name, new_name in pairs:
        compare_component(c, old_name, new_name)
    old_inline, new_inline = _inline(c.old, old, new_refs), _inline(c.new, new, old_refs)
    if old_inline and new_inline:
        compare_object(c, _merged(old_inline), _merged(new_inline), at)


def _inline(document: Schema, schema: Schema, other_refs: set[str]) -> list[Schema]:
    """A union's options written in place, and a lone reference's schema where the other
    side refers to none (a component written out in place, or the reverse)."""
    options = _options(schema)
    if len([o for o in options if _ref(o)]) == 1 and not other_refs:
        return [_resolve(document, o) for o in options]
    return [o for o in options if not _ref(o)]


def _merged(options: list[Schema]) -> Schema:
    """The inline options of a union as one schema: their properties, items and values."""
    merged: Schema = {"properties": {}, "required": []}
    for option in options:
        merged["properties"].update(option.get("properties", {}))
        merged["required"] += option.get("required", [])
        for key in ("items", "additionalProperties"):
            if isinstance(option.get(key), dict):
                merged[key] = option[key]
        if option.get("additionalProperties") is False:
            merged["closed"] = True
    return merged


def compare_component(c: Comparison, old_name: str, new_name: str) -> None:
    """A schema of components.schemas, compared once whichever operations use it."""
    if old_name in c.seen:
        return
    c.seen.add(old_name)
    old = c.old["components"]["schemas"][old_name]
    new = c.new.get("components", {}).get("schemas", {}).get(new_name, {})
    # A request's object that a response holds is an echo of what the client sent (a job's
    # spec); a named enum that both use (JobStatus) also holds values the server picks.
    roles = [True] if old_name in c.requests else []
    roles += [False] if not roles or ("enum" in old and old_name in c.responses) else []
    where = f"schema {old_name} ({' and '.join('request' if r else 'response' for r in roles)})"
    for request in roles:
        compare_values(c, old, new, At(where, "", request))


def compare_object(c: Comparison, old: Schema, new: Schema, at: At) -> None:
    """Properties removed, newly required or no longer required; each kept one's value."""
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    old_required, new_required = set(old.get("required", [])), set(new.get("required", []))
    for name, old_prop in old_props.items():
        prop = at.field(name)
        if name not in new_props:
            if not at.request or old.get("closed"):  # a closed request object refuses it now
                c.flag(at.where, f"removed property {prop.path}")
            continue
        if at.request and name in new_required - old_required:
            c.flag(at.where, f"property {prop.path} became required")
        if not at.request and name in old_required - new_required:
            c.flag(at.where, f"property {prop.path} no longer required")
        compare_values(c, old_prop, new_props[name], prop)
    for name in sorted(set(new_props) - set(old_props)):
        if at.request and name in new_required:
            c.flag(at.where, f"new required property {at.field(name).path}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            compare_values(c, old[key], new[key], at.field(suffix))


def _parameters(operation: Schema) -> dict[str, Schema]:
    return {f"{p.get('in')} {p.get('name')}": p for p in operation.get("parameters", [])}


def compare_operation(c: Comparison, name: str, old: Schema, new: Schema) -> None:
    """Responses, parameters and request body of one operation both documents have."""
    for status, old_response in old.get("responses", {}).items():
        new_response = new.get("responses", {}).get(status)
        if new_response is None:
            c.flag(f"{name} {status}", "removed response")
        else:
            _compare_content(c, old_response, new_response, At(f"{name} {status}", "", False))
    old_params, new_params = _parameters(old), _parameters(new)
    for key, param in old_params.items():
        if key not in new_params:
            c.flag(name, f"removed parameter {key}")
            continue
        if new_params[key].get("required") and not param.get("required"):
            c.flag(name, f"parameter {key} became required")
        at = At(f"{name} parameter {key}", "", True)
        compare_values(c, param.get("schema", {}), new_params[key].get("schema", {}), at)
    for key in sorted(set(new_params) - set(old_params)):
        if new_params[key].get("required"):
            c.flag(name, f"new required parameter {key}")
    old_body, new_body = old.get("requestBody", {}), new.get("requestBody", {})
    if new_body.get("required") and not old_body.get("required"):
        c.flag(name, "request body became required")
    _compare_content(c, old_body, new_body, At(f"{name} request body", "", True))


def _compare_content(c: Comparison, old: Schema, new: Schema, at: At) -> None:
    for media, old_media in old.get("content", {}).items():
        new_media = new.get("content", {}).get(media)
        if new_media is None:
            c.flag(at.where, f"removed content type {media}")
        else:
            compare_values(c, old_media.get("schema", {}), new_media.get("schema", {}), at)


def _used(document: Schema, request: bool) -> set[str]:
    """The components.schemas the requests (bodies, parameters) or the responses use, directly
    or inside another."""
    schemas = document.get("components", {}).get("schemas", {})
    roots = [
        part
        for operation in _operations(document).values()
        for part in (
            (operation.get("requestBody", {}), *operation.get("parameters", []))
            if request
            else operation.get("responses", {}).values()
        )
    ]
    found: set[str] = set()
    queue = list(_refs_in(roots))
    while queue:
        name = queue.pop()
        if name not in found and name in schemas:
            found.add(name)
            queue += _refs_in(schemas[name])
    return found


def _refs_in(value: Any) -> list[str]:
    return REF.findall(json.dumps(value))


def breaking_changes(old: Schema, new: Schema) -> list[str]:
    """Every change from `old` to `new` that can break a client written against `old`."""
    c = Comparison(old, new, _used(old, request=True), _used(old, request=False))
    new_operations = _operations(new)
    for name, operation in _operations(old).items():
        if name not in new_operations:
            c.flag(name, "removed operation")
        else:
            compare_operation(c, name, operation, new_operations[name])
    return c.found
