"""No two public classes share a name across pdmm, attention and bridge (issue 30: attention.sparse and
attention.block both defined `Block`; the edge-range one is now `EdgeBlock`).

A public class is one defined at any depth of a module (`ast.walk`) whose name does not start with "_".

And each name has one home (issue 46 part 6): no module, test or benchmark imports a name from a module that only
imports it itself (experiments.common once re-exported the error classes of experiments/errors.py, and
experiments.train the checkpoint functions of experiments/checkpoints.py); packages' __init__ and the rundir
facade (experiments/rundir.py) are the places meant to gather names.
"""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pdmm", "attention", "bridge")


def public_classes(sources):
    """{class name: [where it is defined]} over {where: Python source}."""
    found = defaultdict(list)
    for where, source in sources.items():
        for node in ast.walk(ast.parse(source, filename=where)):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(where)
    return found


def duplicates(sources):
    """{class name: [where]} for every public class name defined more than once."""
    return {name: places for name, places in public_classes(sources).items() if len(places) > 1}


def package_sources():
    return {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def test_the_packages_have_modules_and_classes():
    sources = package_sources()
    assert {where.split("/")[0] for where in sources} == set(PACKAGES)
    names = public_classes(sources)
    assert {"TokenGraph", "EdgeBlock", "Block", "UnrolledPDMM"} <= set(names)


def test_no_public_class_name_is_defined_twice():
    assert duplicates(package_sources()) == {}


def test_the_check_catches_a_repeated_class_name():
    """Negative control: the old pair of Blocks, one nested inside a function, a private one left alone."""
    sources = {
        "attention/block.py": "class Block:\n    pass\n",
        "attention/sparse.py": "def make():\n    class Block:\n        pass\n    return Block\n",
        "bridge/x.py": "class _Helper:\n    pass\n",
        "pdmm/y.py": "class _Helper:\n    pass\nclass Other:\n    pass\n",
    }
    assert duplicates(sources) == {"Block": ["attention/block.py", "attention/sparse.py"]}


FACADES = {"experiments.rundir"}  # the face of the rundir_* modules (its docstring): commands import from it
IMPORTERS = (*PACKAGES, "experiments", "tests", "benchmarks")


def module_name(where):
    """The dotted module a source path holds: "pdmm/local/__init__.py" -> "pdmm.local"."""
    parts = where.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def defined_names(source):
    """The names a module binds itself at its top level (def, class, assignment, also under if/try), not the ones
    it imports."""
    names, statements = set(), list(ast.parse(source).body)
    while statements:
        statement = statements.pop()
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names.update(node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name))
        else:  # if, try, with, for: the statements they hold, bodies of functions and classes aside
            for field in ("body", "orelse", "finalbody", "handlers"):
                statements.extend(getattr(statement, field, []))
    return names


def imported_from(where, node):
    """The dotted module of a `from ... import` statement in the file at `where`, relative ones resolved."""
    if not node.level:
        return node.module
    package = module_name(where).split(".")
    if not where.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def borrowed_imports(sources):
    """["where:line: name from module"] for every `from module import name` (at any depth) where module is one of
    sources' plain modules (not a package's __init__, not a facade) that does not define name itself."""
    modules = {module_name(where): where for where in sources}
    defined = {where: defined_names(source) for where, source in sources.items()}
    found = []
    for where, source in sources.items():
        for node in ast.walk(ast.parse(source, filename=where)):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = imported_from(where, node)
            home = modules.get(module)
            if home is None or home.endswith("__init__.py") or module in FACADES:
                continue
            for alias in node.names:
                if alias.name not in defined[home] and f"{module}.{alias.name}" not in modules:
                    found.append(f"{where}:{node.lineno}: {alias.name} from {module}")
    return found


def test_every_import_names_the_module_that_defines_it():
    """One home per name (issue 46 part 6): nothing imports a name through a module that only imports it."""
    sources = {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for folder in IMPORTERS
        for path in sorted((ROOT / folder).rglob("*.py"))
    }
    assert {"experiments/errors.py", "experiments/train.py", "tests/test_names.py"} <= set(sources)
    assert borrowed_imports(sources) == []


def test_the_import_check_catches_a_name_borrowed_from_a_module_that_imports_it():
    """Negative control: UsageError through experiments.common (which imports it from errors) is caught, also
    relative, deep in a function and from a package's subpackage, and so is a function's local variable; a
    package's __init__, a facade, a submodule and a name the module defines (also under an if) are not."""
    sources = {
        "experiments/__init__.py": "",
        "experiments/errors.py": "class UsageError(Exception):\n    pass\n",
        "experiments/common.py": (
            "from .errors import UsageError\nif True:\n    DEVICE = 'cpu'\n\n\ndef f():\n    LOCAL = 1\n"
        ),
        "experiments/rundir.py": "from .errors import UsageError\n",
        "experiments/tasks/__init__.py": "from ..errors import UsageError\n",
        "experiments/tasks/base.py": "from ..common import DEVICE, LOCAL, UsageError\nfrom . import base\n",
        "tests/test_x.py": (
            "from experiments import errors\nfrom experiments.tasks import UsageError\n"
            "from experiments.rundir import UsageError\n\n\ndef f():\n    from experiments.common import UsageError\n"
        ),
    }
    assert borrowed_imports(sources) == [
        "experiments/tasks/base.py:1: LOCAL from experiments.common",
        "experiments/tasks/base.py:1: UsageError from experiments.common",
        "tests/test_x.py:7: UsageError from experiments.common",
    ]


def test_modules_imported_from_tests_are_helper_modules():
    """A test module imports no other test module (a test_*.py that moves a name then breaks collection
    elsewhere): what tests share lives in helper modules beside them (tests/tiny_runs.py, *_reference.py, ...)."""
    tests = sorted((ROOT / "tests").glob("*.py"))
    local = {path.stem for path in tests}
    found = [
        f"{path.name}:{node.lineno}: {name}"
        for path in tests
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for name in (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])]
        )
        if isinstance(node, ast.Import | ast.ImportFrom) and name in local and name.startswith("test_")
    ]
    assert len(local) > 50 and {"tiny_runs", "test_names"} <= local
    assert found == []
