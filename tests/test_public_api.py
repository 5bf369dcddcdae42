"""The public surface of pdmm, attention and bridge is typed and documented (CONTRIBUTING.md, "Conventions").

Public means: every function and class a package lists in `__all__`, and every public method, property and
classmethod a public class defines itself (not what it inherits from torch.nn.Module or object). Each must have
  - a type annotation on every parameter (self and cls aside) and on its return (`__init__` and property
    setters aside), and
  - a numpydoc docstring whose "Parameters" section (with its "Other Parameters", numpydoc's place for the less
    used ones) names exactly the signature's parameters and, where the return annotation is not None, a
    "Returns" (or "Yields") section.
A class documents its constructor's parameters in the class docstring ("Parameters", or "Attributes" for a
dataclass whose fields are its parameters). mypy checks that the annotations agree with the code (.ci/run).
"""

import dataclasses
import importlib
import inspect

import pytest
from extras import needs

needs("numpydoc", "docs")
from numpydoc.docscrape import ClassDoc, FunctionDoc  # noqa: E402

PACKAGES = ["pdmm", "attention", "bridge"]


def _documented_names(section):
    """Parameter names a numpydoc section lists ("x, y : float" names two; stars kept off)."""
    names = set()
    for parameter in section:
        for name in parameter.name.split(","):
            names.add(name.strip().lstrip("*"))
    return names


def _signature_names(function, skip_first):
    parameters = list(inspect.signature(function).parameters.values())
    if skip_first:
        parameters = parameters[1:]
    return parameters


def _annotation_problems(function, where, skip_first, needs_return=True):
    problems = []
    for parameter in _signature_names(function, skip_first):
        if parameter.annotation is inspect.Parameter.empty:
            problems.append(f"{where}: parameter {parameter.name} has no annotation")
    if needs_return and inspect.signature(function).return_annotation is inspect.Signature.empty:
        problems.append(f"{where}: no return annotation")
    return problems


def _returns_none(function):
    annotation = inspect.signature(function).return_annotation
    return annotation in (None, "None", type(None))


def _docstring_problems(function, where, skip_first, parameters_section=None):
    if not inspect.getdoc(function):
        return [f"{where}: no docstring"]
    doc = FunctionDoc(function) if parameters_section is None else None
    section = parameters_section if parameters_section is not None else doc["Parameters"] + doc["Other Parameters"]
    wanted = {parameter.name for parameter in _signature_names(function, skip_first)}
    problems = []
    documented = _documented_names(section)
    if wanted != documented:
        problems.append(f"{where}: Parameters section lists {sorted(documented)}, the signature has {sorted(wanted)}")
    if doc is not None and not _returns_none(function) and not (doc["Returns"] or doc["Yields"]):
        problems.append(f"{where}: no Returns section")
    return problems


def _public_objects(package_name):
    package = importlib.import_module(package_name)
    for name in package.__all__:
        obj = getattr(package, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{package_name}.{name}", obj


def _function_problems(function, where, skip_first):
    return _annotation_problems(function, where, skip_first) + _docstring_problems(function, where, skip_first)


def _class_problems(cls, where):
    problems = []
    if not inspect.getdoc(cls):
        problems.append(f"{where}: no class docstring")
    init = cls.__dict__.get("__init__")
    if init is not None and inspect.isfunction(init):
        problems += _annotation_problems(init, f"{where}.__init__", skip_first=True, needs_return=False)
        doc = ClassDoc(cls)
        section = doc["Parameters"] or (doc["Attributes"] if dataclasses.is_dataclass(cls) else [])
        problems += _docstring_problems(init, f"{where}.__init__", skip_first=True, parameters_section=section)
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        member_where = f"{where}.{name}"
        if isinstance(member, property):
            if member.fget is not None:
                problems += _annotation_problems(member.fget, member_where, skip_first=True)
                if not inspect.getdoc(member.fget):
                    problems.append(f"{member_where}: no docstring")
        elif isinstance(member, (classmethod, staticmethod)):
            problems += _function_problems(member.__func__, member_where, skip_first=isinstance(member, classmethod))
        elif inspect.isfunction(member):
            problems += _function_problems(member, member_where, skip_first=True)
    return problems


@pytest.mark.parametrize("package_name", PACKAGES)
def test_public_surface_is_typed_and_documented(package_name):
    problems = []
    for where, obj in _public_objects(package_name):
        if inspect.isclass(obj):
            problems += _class_problems(obj, where)
        else:
            problems += _function_problems(obj, where, skip_first=False)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


def test_the_checks_catch_an_untyped_undocumented_function():
    """Negative control: the rules above fail a function with neither hints nor numpydoc sections."""

    def bare(x, y=1):
        """Add."""
        return x + y

    def good(x: int, y: int = 1) -> int:
        """Add.

        Parameters
        ----------
        x, y : int
            The terms.

        Returns
        -------
        int
            Their sum.
        """
        return x + y

    assert len(_function_problems(bare, "bare", skip_first=False)) == 5
    assert _function_problems(good, "good", skip_first=False) == []
