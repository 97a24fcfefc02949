"""README's generated sections: the job spec reference (from the Pydantic schema, every graph
op and its fields included) and the CLI one.

python -m tools.spec_reference          rewrite the marked sections of README.md
python -m tools.spec_reference --check  exit 1 if README.md is out of date (tests run this)
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel

from app.schemas import job_spec
from app.schemas.graph import OPS, Op
from app.schemas.job_spec import JobSpec

README = Path(__file__).resolve().parent.parent / "README.md"
BOUNDS = {
    "minimum": "≥ {}",
    "exclusiveMinimum": "> {}",
    "maximum": "≤ {}",
    "exclusiveMaximum": "< {}",
    "minLength": "length ≥ {}",
    "maxLength": "length ≤ {}",
    "minItems": "≥ {} items",
    "maxItems": "≤ {} items",
    "minProperties": "≥ {} keys",
    "maxProperties": "≤ {} keys",
    "pattern": "matches `{}`",
}


# The ops by their schema names (class names), and the fields every layer has.
OP_OF_SCHEMA = {cls.__name__: name for name, cls in OPS.items()}
LAYER_FIELDS = tuple(Op.model_fields)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _anchor(name: str) -> str:
    if name in OP_OF_SCHEMA:
        return f"[{OP_OF_SCHEMA[name]}](#op-{OP_OF_SCHEMA[name]})"
    return f"[{name}](#{name.lower()})"


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return _anchor(schema["$ref"].rsplit("/", 1)[1])
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_type(option) for option in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and "patternProperties" in schema:
        values = {_type(v) for v in schema["patternProperties"].values()}
        return f"map of {' | '.join(sorted(values))}"
    return str(kind)


def _bounds(schema: dict[str, Any], prefix: str = "") -> list[str]:
    found = [prefix + fmt.format(schema[k]) for k, fmt in BOUNDS.items() if k in schema]
    for option in schema.get("anyOf", []):
        found += _bounds(option, prefix)
    if isinstance(schema.get("items"), dict):
        found += _bounds(schema["items"], "each ")
    if isinstance(schema.get("propertyNames"), dict):
        found += _bounds(schema["propertyNames"], "keys ")
    for key, pattern in schema.get("patternProperties", {}).items():
        found += [f"keys match `{key}`", *_bounds(pattern, "values ")]
    if isinstance(schema.get("additionalProperties"), dict):
        found += _bounds(schema["additionalProperties"], "values ")
    return list(dict.fromkeys(found))


def _default(model: type[BaseModel] | None, field: str, prop: dict[str, Any]) -> str:
    """The default as JSON; fields built by a factory show what the factory makes."""
    info = model.model_fields.get(field) if model else None
    if info is not None and info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "its defaults"
        return f"`{json.dumps(value)}`"
    return f"`{json.dumps(prop.get('default'))}`"


def _section(
    name: str, schema: dict[str, Any], title: str = "", skip: tuple[str, ...] = ()
) -> Iterator[str]:
    model = OPS.get(OP_OF_SCHEMA.get(name, "")) or getattr(job_spec, name, None)
    required = set(schema.get("required", []))
    rows = [(f, p) for f, p in schema.get("properties", {}).items() if f not in skip]
    yield f"#### {title or name}\n"
    if schema.get("description"):
        yield f"{_cell(schema['description'])}\n"
    if not rows:
        yield "No fields besides `name`, `op` and `inputs`.\n"
        return
    yield "| field | type | default | bounds | meaning |"
    yield "|---|---|---|---|---|"
    for field, prop in rows:
        default = "required" if field in required else _default(model, field, prop)
        bounds = ", ".join(_bounds(prop))
        row = [f"`{field}`", _type(prop), default, bounds, prop.get("description", "")]
        yield "| " + " | ".join(_cell(str(c)) for c in row) + " |"
    yield ""


def _op_sections(defs: dict[str, Any]) -> Iterator[str]:
    """The fields every layer has, then each op's own (its `inputs` only where they differ)."""
    common = Op.model_json_schema()
    common["description"] = "Every layer of a graph has these; each op below adds its own."
    yield from _section("Op", common, "Layer fields")
    inputs = common["properties"]["inputs"]
    for op, cls in OPS.items():
        schema = defs[cls.__name__]
        own_inputs = schema["properties"].get("inputs") != inputs
        skip = tuple(f for f in LAYER_FIELDS if f != "inputs" or not own_inputs)
        yield from _section(cls.__name__, schema, f"op `{op}`", skip)


def spec_reference() -> str:
    """Markdown tables: JobSpec first, then every nested object in the order it is used."""
    schema = JobSpec.model_json_schema()
    defs = schema.pop("$defs", {})
    order, queue = ["JobSpec"], [schema]
    while queue:
        for ref in re.findall(r'"\$ref": "#/\$defs/(\w+)"', json.dumps(queue.pop(0))):
            if ref not in order:
                order.append(ref)
                queue.append(defs[ref])
    lines = ["Generated from the Pydantic schema; `/docs` shows the same with examples.\n"]
    for name in order:
        if name not in OP_OF_SCHEMA:
            lines += _section(name, schema if name == "JobSpec" else defs[name])
    lines += _op_sections(defs)
    return "\n".join(lines).rstrip() + "\n"


def _usage(path: str, command: Any) -> str:
    parts = [path]
    for param in command.params:
        if param.param_type_name == "argument":
            name = param.name.upper()
            parts.append(name if param.required else f"[{name}]")
        elif param.name != "help":
            flag = max(param.opts, key=len)
            value = "" if param.is_flag else " " + flag.lstrip("-").replace("-", "_").upper()
            parts.append(f"[{flag}{value}]" + ("…" if param.multiple else ""))
    return " ".join(parts)


def _commands(path: str, group: Any) -> Iterator[tuple[str, str]]:
    for name, command in group.commands.items():
        full = f"{path} {name}"
        if hasattr(command, "commands"):  # a sub-group: keys, datasets
            yield from _commands(full, command)
        else:
            yield _usage(full, command), (command.help or "").strip().split("\n")[0]


def cli_reference() -> str:
    """One row per command of `epochal`, from the Typer app itself."""
    from epochal_client.cli import build_cli

    lines = ["| command | what |", "|---|---|"]
    rows = _commands("epochal", typer.main.get_command(build_cli()))
    lines += [f"| `{_cell(usage)}` | {_cell(text)} |" for usage, text in rows]
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    """README text with each generated section replaced by its current content."""
    for marker, content in (
        ("spec-reference", spec_reference()),
        ("cli-reference", cli_reference()),
    ):
        pattern = re.compile(
            rf"(<!-- BEGIN {marker}[^>]*-->\n).*?(<!-- END {marker} -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- BEGIN {marker} --> … <!-- END --> section")
        text = pattern.sub(lambda m, c=content: m.group(1) + c + m.group(2), text)
    return text


def main(argv: list[str]) -> int:
    current = README.read_text()
    updated = rewrite(current)
    if "--check" in argv:
        if updated != current:
            print("README.md is out of date: run python -m tools.spec_reference", file=sys.stderr)
            return 1
        return 0
    README.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
