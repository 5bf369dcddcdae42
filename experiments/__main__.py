"""python -m experiments ... is the same as pdmm-bridge ..."""

from .cli import main

raise SystemExit(main())
