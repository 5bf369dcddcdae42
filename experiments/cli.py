"""The pdmm-bridge command line: one module per subcommand, each with add_parser(subparsers) and run(args).

To add a command, write experiments/<name>_command.py and list it in COMMANDS.
"""
import argparse
import sys

from . import (compare_command, configs_command, learn_pdmm_command, network_command, plot_command, probe_command,
               report_command, solve_command, sweep_command, train_command)
from .common import RunFailure, UsageError, first_line, package_version, tune_allocator

COMMANDS = [solve_command, train_command, sweep_command, configs_command, plot_command, report_command,
            learn_pdmm_command, compare_command, probe_command, network_command]


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line, `prog: error: message`, without the usage block (exit code 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and "(default: ...)" after each option's help unless it names one already."""

    def _get_help_string(self, action):
        unset = action.default is None or action.default is False or action.default in ([], ())
        if unset or "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


def main(argv=None):
    """Parse argv (default sys.argv[1:]) and run the chosen command; returns its exit code."""
    parser = Parser(prog="pdmm-bridge", description="PDMM on networkx graphs, attention variants, and the experiments between them.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        subparser = command.add_parser(subparsers)
        subparser.formatter_class = HelpFormatter
        subparser.set_defaults(run=command.run)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for commands that relaunch themselves
    tune_allocator()
    try:
        return args.run(args)
    except UsageError as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except RunFailure as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:  # commands that keep partial work say how to resume it themselves
        print(f"{parser.prog} {args.command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except (MemoryError, RuntimeError) as err:  # torch.OutOfMemoryError is a RuntimeError
        if not out_of_memory(err):
            raise
        print(f"{parser.prog} {args.command}: error: out of memory: {first_line(err)}; use a smaller size "
              "(batch, width, nodes)", file=sys.stderr)
        raise SystemExit(1) from None


def out_of_memory(err: BaseException) -> bool:
    """Whether err is an allocation failure: MemoryError (numpy's too), torch.OutOfMemoryError (a GPU) or the
    RuntimeError of torch's CPU allocator ("... not enough memory: you tried to allocate N bytes", or on Linux
    "DefaultCPUAllocator: can't allocate memory: ..."). One line, exit 1 (docs/guide/runs.md, "Exit codes")."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError" or \
        any(words in str(err).lower() for words in ("not enough memory", "out of memory", "can't allocate memory"))
