"""Lazy package exports (a name is imported from its module on first use) and moved modules' old paths.

Keeps `import openmanus_lite` (and `openmanus_lite.data`) fast and free of torch, unsloth, pandas and
matplotlib until a name that needs them is used.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any], exports: dict[str, str]) -> tuple[Callable, Callable]:
    """`__getattr__` and `__dir__` for `package`, whose names `exports` maps to submodules (relative names)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value  # the next lookup skips __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__


def moved_module(old: str, new: str) -> None:
    """Call from module `old` as it is imported: it becomes module `new`, with a DeprecationWarning, so user code
    written against a module's old path keeps working after the module moved."""
    warnings.warn(f"{old} moved to {new}", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
