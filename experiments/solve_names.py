"""The names in pdmm's registries that the parser of `pdmm-bridge solve` lists and checks, written out so that
`solve --help` and an argument error answer without importing pdmm or torch (docs/guide/runs.md, "The command
line"). tests/test_solve_cli.py checks every name and number here against the registry it copies."""

METHODS = {  # pdmm.METHODS, in its order: each method with the KEYs of its spec (solve_options.accepted)
    "pdmm": ("rho", "theta"),
    "qa-pdmm": ("rho", "theta", "eta"),
    "admm": ("rho",),
    "gossip": ("mixing",),
    "chebyshev": ("mixing", "low", "high"),
    "dgd": ("mixing", "alpha", "step"),
    "extra": ("mixing", "alpha"),
    "nids": ("mixing", "alpha"),
    "gradient-tracking": ("mixing", "alpha"),
}
PROBLEMS = ("averaging", "least_squares", "lasso", "logistic", "quadratic")  # pdmm.synthetic.KINDS
TOPOLOGIES = (  # pdmm.TOPOLOGIES
    "ring",
    "path",
    "star",
    "complete",
    "grid",
    "torus",
    "erdos_renyi",
    "random_geometric",
    "random_regular",
    "small_world",
    "barabasi_albert",
)
MIXINGS = ("metropolis", "lazy_metropolis", "max_degree")  # pdmm.mixing.KINDS
STEPS = ("constant", "diminishing")  # pdmm.decentralised.STEPS
DATASETS = ("breast_cancer",)  # pdmm.datasets.DATASETS
DTYPES = ("float64", "float32")  # names of torch floating-point types (solve_runs.DTYPES)
BREAST_CANCER_L2 = 10.0  # pdmm.datasets.BREAST_CANCER_L2
NPZ_LIMIT = 2**30  # pdmm.npz.NPZ_LIMIT
NPZ_RATIO = 200  # pdmm.npz.NPZ_RATIO
TUNE_TARGET = 1e-6  # pdmm.tuning.TARGET
