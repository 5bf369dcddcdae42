"""No two public classes share a name across pdmm, attention and bridge (issue 30: attention.sparse and
attention.block both defined `Block`; the edge-range one is now `EdgeBlock`).

A public class is one defined at any depth of a module (`ast.walk`) whose name does not start with "_".
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
