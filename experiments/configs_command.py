"""pdmm-bridge configs: list the built-in configs, each with its one-line description.

    pdmm-bridge configs
    pdmm-bridge train shakespeare_char_cpu            # a built-in config by name
    pdmm-bridge sweep repro/belief_char --out runs/belief_char

Every command that takes a config accepts these names as well as a file path; copy a config's file
(listed with --paths) to change more than `--set` overrides.
"""

from .config import builtin_configs, description


def add_parser(subparsers):
    parser = subparsers.add_parser("configs", help="list the built-in configs", description=__doc__)
    parser.add_argument("--paths", action="store_true", help="show each config's file instead of its description")
    return parser


def run(args):
    configs = builtin_configs()
    width = max(map(len, configs))
    for name, path in configs.items():
        print(f"{name:<{width}}  {path if args.paths else description(path)}")
    return 0
