"""The project's shape: no command module imports another (what two commands share lives in a library
module), and the pdmm package imports nothing from attention, bridge or experiments."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path):
    """The modules a file imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_no_command_imports_another():
    commands = sorted((ROOT / "experiments").glob("*_command.py"))
    assert len(commands) >= 10
    names = {f"experiments.{path.stem}" for path in commands}
    crossing = {path.name: sorted(imported_modules(path) & (names - {f"experiments.{path.stem}"})) for path in commands}
    assert not any(crossing.values()), crossing


def test_pdmm_imports_nothing_from_the_other_packages():
    others = ("attention", "bridge", "experiments")
    leaks = {
        str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path) if m.split(".")[0] in others)
        for path in (ROOT / "pdmm").rglob("*.py")
    }
    assert not any(leaks.values()), leaks


def test_the_import_reader_sees_relative_imports():
    found = imported_modules(ROOT / "experiments" / "report_command.py")
    assert "experiments.plots" in found and "experiments.plots.plot_groups" in found


def module_imports(module, source, is_package, modules):
    """The modules of `modules` that `source` (the text of module `module`) imports, at its top or inside a
    function: `import a.b`, `from a import b`, `from .b import c`, `from .. import b`. `from P import name` names
    the module P.name where that is one, else P itself; a module's package __init__, which Python runs before it,
    is not counted as an import of it."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                named = [".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules]
                found.update(named[:1])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    found.add(f"{base}.{alias.name}")
                elif base in modules:
                    found.add(base)
    found.discard(module)
    return found


def pdmm_import_graph():
    """{module: the pdmm modules it imports} over every file of the pdmm package."""
    paths = {}
    for path in (ROOT / "pdmm").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {
        module: module_imports(module, path.read_text(), path.name == "__init__.py", set(paths))
        for module, path in paths.items()
    }


def find_cycle(graph):
    """A cycle [a, b, ..., a] of the directed graph {node: successors}, or None where it has none."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return stack[stack.index(successor) :] + [successor]
            if successor not in state:
                cycle = visit(successor)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_pdmm_has_no_import_cycle():
    graph = pdmm_import_graph()
    assert {"pdmm", "pdmm.solve", "pdmm.distributed", "pdmm.local.base"} <= set(graph)
    assert "pdmm.solve" in graph["pdmm"] and graph["pdmm.local"] >= {"pdmm.local.base"}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_sees_cycles_and_every_kind_of_import():
    """Negative controls: a cycle through three modules, and one closed by an import inside a function, are found;
    the import reader resolves relative, absolute and function-level imports."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    modules = {"p", "p.a", "p.b", "p.c", "p.sub", "p.sub.d", "p.sub.e"}
    source = (
        "import os\nfrom ..a import f\ndef g():\n    from .. import b\n    import p.c.x\n    from . import d\n"
        "    from ..sub import d as again\n"
    )
    assert module_imports("p.sub.e", source, False, modules) == {"p.a", "p.b", "p.c", "p.sub.d"}
    assert module_imports("p.sub", "from . import e\nfrom .d import name", True, modules) == {"p.sub.e", "p.sub.d"}
    sources = {"p.a": "from .b import f", "p.b": "def f():\n    from . import a", "p.c": "import p.a"}
    graph = {module: module_imports(module, text, False, modules) for module, text in sources.items()}
    assert find_cycle(graph) == ["p.a", "p.b", "p.a"]
