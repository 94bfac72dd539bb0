"""The base of every config model: frozen, camelCase aliases, unknown keys refused, and field
docstrings as descriptions (docs/configuration.md is generated from them).

In a module of its own so that a config section can live in a module beside the component it
feeds (components/stack/checkpoints.py, ...) and still be one of the stack's models, without an
import circle through config.py.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # Field docstrings are the descriptions: the configuration reference (docs/configuration.md,
        # components/offline/config_reference.py) is generated from them. pydantic's
        # use_attribute_docstrings reads them by the same rule, but on Python < 3.13 it finds each
        # class's source by walking the call stack with inspect.getmodule, which maps the file of
        # every loaded module on its first call (about 0.1 s of every render, 1,200 modules loaded);
        # here one parse of this file serves every model.
        super().__pydantic_init_subclass__(**kwargs)
        docs = _field_docstrings(cls)
        for name, info in cls.model_fields.items():
            if info.description is None and name in docs:
                info.description = docs[name]


@functools.cache
def _module_field_docstrings(path: str) -> dict[str, dict[str, str]]:
    """Class qualname -> {field: docstring} for every class in the Python file at `path` (in functions
    too, as `f.<locals>.Model`). pydantic's rule
    (pydantic/_internal/_docs_extraction.py, DocstringVisitor): a string statement right after an
    annotated assignment to a name documents that name, cleaned with inspect.cleandoc."""
    found: dict[str, dict[str, str]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                docs, previous = {}, None
                for stmt in node.body:
                    if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                            and isinstance(stmt.value.value, str) and isinstance(previous, ast.AnnAssign)
                            and isinstance(previous.target, ast.Name)):
                        docs[previous.target.id] = inspect.cleandoc(stmt.value.value)
                    previous = stmt
                found[prefix + node.name] = docs
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, f"{prefix}{node.name}.<locals>.")  # a model defined in a function
            else:
                for block in ("body", "orelse", "finalbody", "handlers"):
                    visit(getattr(node, block, []), prefix)

    visit(ast.parse(Path(path).read_text(encoding="utf-8")).body, "")
    return found


def _field_docstrings(cls: type) -> dict[str, str]:
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    return _module_field_docstrings(path).get(cls.__qualname__, {}) if path else {}
