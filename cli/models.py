"""``geonp models``: list the built-in models with their cards."""

from __future__ import annotations

import json

import click


@click.command(short_help="List the built-in models and their cards.")
@click.option("--json", "as_json", is_flag=True, help="Print the cards as JSON.")
def models(as_json: bool) -> None:
    """List the built-in models (use their names with --model).

    \b
    Example:
      geonp models
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
        for key in ("command", "training_seconds", "hardware", "scores"):
            if card.get(key) is not None:
                click.echo(f"  {key}: {json.dumps(card[key]) if isinstance(card[key], dict) else card[key]}")
