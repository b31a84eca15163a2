"""No import cycle between the package's modules, type-checking imports included (docs/architecture.md).

The graph is read from the source with `ast`, not by importing: every import at module level counts, also those
under `if TYPE_CHECKING:` (a reader follows them as dependencies), in `try` blocks and in class bodies. Imports
inside functions do not count: they are the deliberate lazy ones (a registry loading its formats when first asked,
an optional extra loaded when used). `from package import name` is an edge to `package.name` when that is a
module, else to `package`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import agentic_middleware

PACKAGE = Path(agentic_middleware.__file__).parent


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Each module's dotted name, with its file and whether it is a package's `__init__`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run when the module is imported (or read by a type checker): all but function bodies."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        yield node
        for name in ("body", "orelse", "finalbody"):
            yield from _module_level(getattr(node, name, []))
        for handler in getattr(node, "handlers", []):
            yield from _module_level(handler.body)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Which of the package's modules each of its modules imports at module level."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        edges = set()
        for node in _module_level(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    target = f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                    if target in modules:
                        edges.add(target)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    # The graph is really read: edges of each kind the reader must see are there.
    assert "agentic_middleware.asking" in graph["agentic_middleware.loop"]  # relative, at module level
    assert "agentic_middleware.chains" in graph["agentic_middleware.loop_setup"]  # under TYPE_CHECKING
    assert "agentic_middleware.native" in graph["agentic_middleware.surfaces"]  # a package, under TYPE_CHECKING
    assert "agentic_middleware.sse" in graph["agentic_middleware.surfaces.chat"]  # `from .. import sse`
    assert cycles(graph) == []


def test_a_cycle_through_type_checking_imports_is_found(tmp_path: Path) -> None:
    """The check itself: two modules importing each other, one only for type checking, are a cycle."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import Thing\n"
    )
    (package / "c.py").write_text("def later():\n    from . import a\n")  # in a function: not counted
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.sub.b"]]
