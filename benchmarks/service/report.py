"""Printing results: a readable table and machine-readable `BENCH name value unit` lines."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Report:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, note: str = "") -> None:
        self.rows.append((name, f"{value:.4g}", unit, note))
        print(f"BENCH {name} {value:.6g} {unit}", flush=True)

    def table(self, title: str) -> str:
        width = max((len(r[0]) for r in self.rows), default=10)
        lines = [title, "-" * len(title)]
        lines += [f"{n:<{width}}  {v:>10} {u:<8} {note}" for n, v, u, note in self.rows]
        return "\n".join(lines)
