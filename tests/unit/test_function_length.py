"""No function in the layer is over 80 lines (issue 31), kept, not checked once.

A function's length is its ``def`` line to its last line (``end_lineno - lineno + 1``, decorators left out), for
every function and method, nested ones included (each counted on its own and inside its parent). The functions
over the limit when the rule came were listed and split one by one; the list is gone: any function over the
limit fails.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

LAYER = Path(__file__).resolve().parents[2] / "layers" / "common" / "support_agent"
LIMIT = 80


def lengths(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, length) of every function under ``tree``, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            assert node.end_lineno is not None
            yield name, node.end_lineno - node.lineno + 1
            yield from lengths(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from lengths(node, prefix + node.name + ".")
        else:
            yield from lengths(node, prefix)


def over_the_limit() -> dict[str, int]:
    """``{"<path under support_agent/>::<Class.function or outer.inner>": its length}`` of each one over."""
    found: dict[str, int] = {}
    for path in sorted(LAYER.rglob("*.py")):
        module = path.relative_to(LAYER).as_posix()
        for name, n in lengths(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if n > LIMIT:
                key = f"{module}::{name}"
                found[key] = max(n, found.get(key, 0))
    return found


def test_the_measure_counts_nested_functions_and_methods() -> None:
    tree = ast.parse(
        "class A:\n    def m(self):\n        def inner():\n            pass\n        return inner\n"
        "async def f():\n    pass\n"
    )
    assert dict(lengths(tree)) == {"A.m": 4, "A.m.inner": 2, "f": 2}


def test_no_function_in_the_layer_is_over_80_lines() -> None:
    found = over_the_limit()
    assert not found, f"over {LIMIT} lines: split them {found}"
