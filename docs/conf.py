"""Sphinx configuration of the pdmm-bridge documentation (build: python -m sphinx -W -b html docs docs/_build).

Markdown pages through MyST (with $...$ maths), the API reference from the docstrings by autodoc
and numpydoc. MathJax comes with the build (sphinx-mathjax-offline copies MathJax 3 into _static/mathjax), so
the pages render their maths without a network. Warnings are errors in .ci/run, so a broken link or a missing
reference fails CI.
"""

import sys
from importlib.metadata import version as installed_version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the checkout, also when it is not the installed copy

project = "pdmm-bridge"
author = "the pdmm-bridge developers"
copyright = "2026, " + author
release = installed_version("pdmm-bridge")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # the module's name has dashes; it sets mathjax_path to _static/mathjax/tex-chtml.js
    "sphinx.ext.viewcode",
    "numpydoc",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3  # [text](page.md#1-title) links to numbered sections
numpydoc_show_class_members = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"  # numpydoc's sections give each parameter's type: "description" listed them twice
maximum_signature_line_length = 100  # a longer signature (pdmm.solve's) shows one parameter a line
exclude_patterns = ["_build", "compare", "repro", "figures/**/*.md"]
html_theme = "furo"
html_title = "pdmm-bridge"
