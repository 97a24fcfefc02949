"""The docs site's generated references: the job spec and the graph ops (from the Pydantic
schema) and the CLI (from the Typer app), each in the marked section of its page under docs/.

python -m tools.spec_reference          rewrite the marked sections of the reference pages
python -m tools.spec_reference --check  exit 1 if a page is out of date (tests run this)
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel

from app.schemas import dataset_spec, graph, job_spec
from app.schemas.graph import OPS, Op
from app.schemas.job_spec import JobSpec

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "references"
# Each generated section (its marker) and the page that holds it.
PAGES = {
    "spec-reference": REFERENCE / "spec.md",
    "ops-reference": REFERENCE / "ops.md",
    "cli-reference": REFERENCE / "cli.md",
}
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


def _spec_model(name: str) -> type[BaseModel] | None:
    """The spec's model class a schema component is named after, from the module defining it."""
    for module in (job_spec, dataset_spec, graph):
        model = getattr(module, name, None)
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model
    return None


def _section(
    name: str, schema: dict[str, Any], title: str = "", skip: tuple[str, ...] = ()
) -> Iterator[str]:
    model = OPS.get(OP_OF_SCHEMA.get(name, "")) or _spec_model(name)
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
    return _linked("\n".join(lines).rstrip() + "\n", "ops.md")


def ops_reference() -> str:
    """Markdown tables: the fields every layer has, then each graph op's own."""
    defs = JobSpec.model_json_schema().get("$defs", {})
    lines = ["Generated from the Pydantic schema of each op.\n", *_op_sections(defs)]
    return _linked("\n".join(lines).rstrip() + "\n", "spec.md")


def _linked(page: str, other: str) -> str:
    """The page with each link to a heading it lacks pointed at the other reference page."""
    own = {_slug(heading) for heading in re.findall(r"^#### (.+)$", page, re.MULTILINE)}

    def point(match: re.Match[str]) -> str:
        anchor = match.group(1)
        return match.group(0) if anchor in own else f"]({other}#{anchor})"

    return re.sub(r"\]\(#([\w-]+)\)", point, page)


def _slug(heading: str) -> str:
    """A heading's anchor, as GitHub and the docs site make it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _usage(path: str, command: Any) -> str:
    parts = [path]
    for param in command.params:
        if param.param_type_name == "argument":
            name = param.name.upper()
            parts.append(name if param.required else f"[{name}]")
        elif param.name != "help":
            # the first long name: an option's current name comes before the old one it keeps
            flag = next((o for o in param.opts if o.startswith("--")), param.opts[0])
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


GENERATORS: dict[str, Callable[[], str]] = {
    "spec-reference": spec_reference,
    "ops-reference": ops_reference,
    "cli-reference": cli_reference,
}


def _pattern(marker: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN {marker}[^>]*-->\n).*?(<!-- END {marker} -->)", re.DOTALL)


def rewrite(text: str) -> str:
    """A page's text with each generated section it holds replaced by its current content."""
    found = [marker for marker in GENERATORS if _pattern(marker).search(text)]
    if not found:
        raise SystemExit("no <!-- BEGIN …-reference --> … <!-- END --> section in the page")
    for marker in found:
        content = GENERATORS[marker]()

        def fill(match: re.Match[str], content: str = content) -> str:
            return match.group(1) + content + match.group(2)

        text = _pattern(marker).sub(fill, text)
    return text


def main(argv: list[str]) -> int:
    stale = []
    for marker, page in PAGES.items():
        current = page.read_text()
        if not _pattern(marker).search(current):
            raise SystemExit(f"{page.relative_to(ROOT)} has no <!-- BEGIN {marker} --> section")
        updated = rewrite(current)
        if updated == current:
            continue
        stale.append(str(page.relative_to(ROOT)))
        if "--check" not in argv:
            page.write_text(updated)
    if stale and "--check" in argv:
        stale_pages = ", ".join(stale)
        print(f"out of date: {stale_pages}: run python -m tools.spec_reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
