"""The pdmm-bridge command line: one module per subcommand, each with add_parser(subparsers) and run(args).

To add a command, write experiments/<name>_command.py and list it in COMMANDS.
"""
import argparse
import sys

from . import (compare_command, learn_pdmm_command, plot_command, probe_command, report_command, solve_command,
               sweep_command, train_command)
from .common import UsageError, tune_allocator

COMMANDS = [solve_command, train_command, sweep_command, plot_command, report_command, learn_pdmm_command,
            compare_command, probe_command]


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line, `prog: error: message`, without the usage block (exit code 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None):
    """Parse argv (default sys.argv[1:]) and run the chosen command; returns its exit code."""
    parser = Parser(prog="pdmm-bridge", description="PDMM on networkx graphs, attention variants, and the experiments between them.")
    subparsers = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers).set_defaults(run=command.run)
    args = parser.parse_args(argv)
    tune_allocator()
    try:
        return args.run(args)
    except UsageError as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
