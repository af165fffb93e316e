"""``geonp models``: list the built-in models with their cards."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import click

#: Width of the wrapped score lines.
WIDTH = 100
#: Columns a score table shows at most (``--json`` prints every field); these first when present.
MAX_COLUMNS = 6
PREFERRED_COLUMNS = ("lo", "hi", "n", "rmse", "crps", "nll", "coverage95", "rmse_ratio_vs_gdal", "mean_std")


@click.command(short_help="List the built-in models and their cards.")
@click.option("--json", "as_json", is_flag=True, help="Print the cards as JSON.")
def models(as_json: bool) -> None:
    """List the built-in models (use their names with --model).

    \b
    Example:
      geonp models
      geonp models --json
    """
    from geonp import list_models

    cards = list_models()
    if as_json:
        click.echo(json.dumps(cards, indent=2, default=str))
        return
    if not cards:
        click.echo("No built-in models are installed.")
    for card in cards:
        click.echo(f"{card['name']}: {card.get('description', '')}")
        model = card.get("model") or {}
        click.echo(f"  architecture: {model.get('arch')}/{model.get('attention')}, width {model.get('dim')}, "
                   f"depth {model.get('depth')}, coordinates in {model.get('coord_unit')}s")
        for key in ("command", "training_seconds", "hardware"):
            if card.get(key) is not None:
                click.echo(f"  {key}: {card[key]}")
        if card.get("near"):
            near = card["near"]
            click.echo(f"  near model: {near.get('name')}, for the tiles whose gaps all lie near data "
                       f"(near context {(near.get('task_shape') or {}).get('near_context')}; {near['path']})")
        if card.get("scores") is not None:
            click.echo("  scores (geonp models --json prints every field):")
            for line in score_lines(card["scores"], indent="    "):
                click.echo(line)


def score_lines(scores: Any, *, indent: str = "") -> list[str]:
    """A model card's scores as short lines: ``key: value``, and tables for per-mask scores.

    Args:
        scores: The card's ``scores`` (any JSON value).
        indent: Put before every line.

    Returns:
        Lines of at most about :data:`WIDTH` characters.
    """
    if not isinstance(scores, dict):
        return _wrap(f"{indent}{_fmt(scores)}", indent)
    lines: list[str] = []
    for key, value in scores.items():
        lines.extend(_item(str(key), value, indent))
    return lines


def _item(key: str, value: Any, indent: str) -> list[str]:
    if _scalar(value):
        return _wrap(f"{indent}{key}: {_fmt(value)}", indent + "  ")
    if isinstance(value, list) and all(_scalar(v) for v in value):
        return _wrap(f"{indent}{key}: {', '.join(_fmt(v) for v in value)}", indent + "  ")
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [f"{indent}{key}:", *_table([(str(i + 1), row) for i, row in enumerate(value)], indent + "  ")]
    if isinstance(value, dict) and all(_scalar(v) for v in value.values()):
        return _wrap(f"{indent}{key}: {', '.join(f'{k} {_fmt(v)}' for k, v in value.items())}", indent + "  ")
    if isinstance(value, dict):
        # several entries that are mappings (scores per mask): one table row each, the rest below
        rows = [(str(k), v) for k, v in value.items() if isinstance(v, dict)]
        lines = [f"{indent}{key}:"]
        if len(rows) > 1:
            lines.extend(_table(rows, indent + "  "))
        rest = {k: v for k, v in value.items() if len(rows) <= 1 or not isinstance(v, dict)}
        lines.extend(score_lines(rest, indent=indent + "  "))
        return lines
    return _wrap(f"{indent}{key}: {json.dumps(value, default=str)}", indent + "  ")


def _table(rows: list[tuple[str, dict]], indent: str) -> list[str]:
    """Rows of scalar fields as an aligned table (nested fields left to ``--json``)."""
    keys: list[str] = []
    for _, row in rows:
        keys.extend(k for k, v in row.items() if _scalar(v) and k not in keys)
    columns = [k for k in PREFERRED_COLUMNS if k in keys] + [k for k in keys if k not in PREFERRED_COLUMNS]
    columns = columns[:MAX_COLUMNS]
    cells = [[label] + [_fmt(row.get(k, "")) for k in columns] for label, row in rows]
    header = [""] + columns
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]

    def line(values: list[str]) -> str:
        first = values[0].ljust(widths[0])
        return indent + "  ".join([first, *(v.rjust(w) for v, w in zip(values[1:], widths[1:], strict=True))])

    return [line(header).rstrip(), *(line(c) for c in cells)]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return "" if value is None else str(value)


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [text]
