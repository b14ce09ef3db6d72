"""A package whose ``__init__`` only re-exports names, imported without running it: each name is
imported from its own module when first read.

Powertools' ``event_handler`` package imports every resolver it offers (AppSync pulls in asyncio) and
``utilities.data_classes`` every event class (~30 modules), though an HTTP function uses one resolver and
one event class; a cold start paid ~30 ms for the rest (docs/PERFORMANCE.md). ``lazy_package`` reads the
``__init__`` instead of running it: when it is nothing but a docstring, ``from … import`` lines and
``__all__``, the package gets a module whose names are imported on first use (``from package import
Name`` works as before); anything else in it, and the package is left to import as usual.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from typing import Any


class _LazyPackage(types.ModuleType):
    """``names``: each re-exported name and the (module, name) it comes from."""

    _names: dict[str, tuple[str, str]]

    def __getattr__(self, attr: str) -> Any:
        if attr not in self._names:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        module, name = self._names[attr]
        value = getattr(importlib.import_module(module), name)
        super().__setattr__(attr, value)
        return value

    def __setattr__(self, attr: str, value: Any) -> None:
        # The import system sets a submodule on its package once loaded. When the ``__init__`` re-exports
        # a name of the same name from it (``from .event_source import event_source``), the name wins, as
        # it would after the real ``__init__``.
        if isinstance(value, types.ModuleType) and self._names.get(attr) == (value.__name__, attr):
            value = getattr(value, attr)
        super().__setattr__(attr, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._names))


def _reexports(package: str, source: str) -> tuple[dict[str, tuple[str, str]], list[str] | None] | None:
    """The names ``source`` (a package's ``__init__``) re-exports, and its ``__all__``; None if it does more."""
    names: dict[str, tuple[str, str]] = {}
    exported: list[str] | None = None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue  # a docstring
        if isinstance(node, ast.ImportFrom) and not any(a.name == "*" for a in node.names):
            module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            names.update({a.asname or a.name: (module, a.name) for a in node.names})
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            exported = list(ast.literal_eval(node.value))
            continue
        return None
    return names, exported


def lazy_package(name: str) -> bool:
    """Make package ``name`` lazy, if it is not imported yet and its ``__init__`` only re-exports names."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations or not (spec.origin or "").endswith(".py"):
        return False
    assert spec.origin is not None
    with open(spec.origin, encoding="utf-8") as fh:
        found = _reexports(name, fh.read())
    if found is None:
        return False
    names, exported = found
    module = importlib.util.module_from_spec(spec)
    module._names = names  # type: ignore[attr-defined]
    if exported is not None:
        module.__dict__["__all__"] = exported
    module.__class__ = _LazyPackage
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return True
