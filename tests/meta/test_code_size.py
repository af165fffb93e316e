"""The size rules of the code base: no module over 400 lines, no function over 60 lines of code, no
public fill function with more than 8 parameters (one concept per type, small units)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import geonp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "geonp", ROOT / "cli"]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LOC = 60
MAX_FILL_PARAMETERS = 8


def _sources() -> list[Path]:
    return sorted(p for base in PACKAGES for p in base.rglob("*.py"))


def function_loc(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """Lines of code of a function: its docstring, blank lines and comment lines not counted."""
    body = node.body
    docstring: set[int] = set()
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        docstring = set(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(1 for i in range(node.lineno, node.end_lineno + 1)
               if i not in docstring and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))


def test_the_counter_counts_code_only():
    src = 'def f(a):\n    """Doc.\n\n    More doc.\n    """\n    # a comment\n\n    x = a\n    return x\n'
    node = ast.parse(src).body[0]
    assert function_loc(node, src.splitlines()) == 3  # def, x = a, return x


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these modules along a seam: {long}"


def test_no_function_over_60_lines_of_code():
    long = {}
    for path in _sources():
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                loc = function_loc(node, text.splitlines())
                if loc > MAX_FUNCTION_LOC:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = loc
    assert long == {}, f"split these functions into named steps: {long}"


@pytest.mark.parametrize("name", ["fill", "fill_array", "fill_raster", "fill_many"])
def test_public_fill_functions_take_at_most_8_parameters(name):
    parameters = inspect.signature(getattr(geonp, name)).parameters
    assert len(parameters) <= MAX_FILL_PARAMETERS, list(parameters)
