"""SplitMix64's constants (Steele, Lea and Flood, OOPSLA 2014), shared by pdmm.draws (the Python and torch forms of
a draw) and pdmm.numba_kernels (its numba form), so the three compute the same bits (docs/guide/network.md, "How
the events are drawn")."""

MASK = (1 << 64) - 1  # arithmetic mod 2^64
GAMMA, C1, C2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # the increment and mix's multipliers
SHIFTS = (30, 27, 31)  # mix's three right shifts
