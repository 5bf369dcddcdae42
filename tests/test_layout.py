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
