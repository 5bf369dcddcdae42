"""Optional extras in the tests (README.md, "Install"; CONTRIBUTING.md, "Set up"). The `test` extra brings only
what every test needs; a test that needs a package of another extra calls `needs`, so where that package is
missing the test (or its whole module, when called at the module's top) is skipped, its reason naming the extra to
install. Under PDMM_BRIDGE_TEST_EXTRAS=required, which .ci/run sets after installing the `dev` extra, a missing
package fails the test instead: no test silently stops running in CI."""

import os
import sys
from types import ModuleType

import pytest

REQUIRED = os.environ.get("PDMM_BRIDGE_TEST_EXTRAS") == "required"
EXTRA_MODULES = {  # each optional extra of pyproject.toml: the module that shows it is installed
    "numba": "numba",
    "sklearn": "sklearn",
    "distributed": "pymetis",
    "pyg": "torch_geometric",
    "frames": "pandas",
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "benchopt": "benchopt.runner",  # not "benchopt": benchmarks/benchopt reads as a namespace package of that name
    "docs": "sphinx",
}


def needs(module: str, extra: str, minversion: str | None = None) -> ModuleType:
    """`module` imported (at least `minversion`, compared with its __version__). Where it is missing or older, the
    calling test is skipped, or the test module when called at its top, with the reason 'MODULE is not installed:
    pip install -e ".[EXTRA]"'; under REQUIRED it fails instead."""
    try:
        return pytest.importorskip(module, minversion, reason=f'{module} is not installed: pip install -e ".[{extra}]"')
    except pytest.skip.Exception as skip:
        if REQUIRED:
            pytest.fail(f"{skip.msg} (PDMM_BRIDGE_TEST_EXTRAS=required: every extra must be installed)", pytrace=False)
        raise


def needs_extra(extra: str) -> ModuleType:
    """needs(EXTRA_MODULES[extra], extra): the test skipped where the optional extra `extra` is not installed."""
    return needs(EXTRA_MODULES[extra], extra)


def hide(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make `package` and its submodules unimportable for the rest of one test, as where it is not installed:
    `import package` then raises ModuleNotFoundError."""
    for name in [package, *(name for name in sys.modules if name.startswith(f"{package}."))]:
        monkeypatch.setitem(sys.modules, name, None)
