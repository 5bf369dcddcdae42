"""The pdmm-bridge command line: one module per subcommand, each with add_parser(subparsers) and run(args).

To add a command, write experiments/<name>_command.py and list it in COMMANDS with the one-line summary its
add_parser gives. Only the chosen command's module is imported, so `pdmm-bridge --help` and `--version` start at
once; the other commands are listed by their summaries. A command module imports only what its parser needs
at its top and the libraries (torch, matplotlib) in run(), so `COMMAND --help` and an argument error answer at
once too: no parser needs a library (solve's lists pdmm's names from experiments/solve_names.py).
`pdmm-bridge` alone prints that list and exits 2. An unrecognized option that names a config key (`train --device
cuda`, `train --device=cuda` without a config) is answered with the --set that sets it (set_hint).
"""

import argparse
import importlib
import os
import select
import signal
import sys
import threading

from . import rundir
from .config import TABLES, table_keys
from .errors import RunFailure, UsageError, first_line, package_version

COMMANDS = {  # name: (module, the summary its add_parser registers; tests/test_cli.py checks they agree)
    "solve": ("solve_command", "solve one problem with one or several methods"),
    "train": ("train_command", "train one attention model on one task"),
    "sweep": ("sweep_command", "train a grid of variants x seeds"),
    "configs": ("configs_command", "list the built-in configs"),
    "plot": ("plot_command", "plot a metric of runs: mean and min..max over seeds"),
    "report": ("report_command", "write SWEEP_DIR/report.md: a table row per variant"),
    "learn-pdmm": ("learn_pdmm_command", "learned PDMM against the best constant rho"),
    "compare": ("compare_command", "transformers vs classical averaging round by round on graph_consensus"),
    "probe": ("probe_command", "per-layer discrepancy of a trained run vs PDMM's residual"),
    "network-sweep": ("network_command", "iterations to 1e-6 under loss, sleep and quantisation"),
    "partition": ("partition_command", "cut a problem into shards, one per rank"),
}


def command_module(name):
    """The module of command `name` (imported on first use)."""
    return importlib.import_module(f".{COMMANDS[name][0]}", __package__)


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line, `prog: error: message`, without the usage block (exit code 2), and
    ends with the parser's `hint` (set_hint's, for the command chosen)."""

    hint = ""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}{self.hint}\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and "(default: ...)" after each option's help unless it names one already."""

    def _get_help_string(self, action):
        unset = action.default is None or action.default is False or action.default in ([], ())
        if unset or "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


def main(argv=None):
    """Parse argv (default sys.argv[1:]) and run the chosen command; returns its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    honour_sigint()
    parser = Parser(
        prog="pdmm-bridge", description="PDMM on networkx graphs, attention variants, and the experiments between them."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    chosen = argv[0] if argv and argv[0] in COMMANDS else None  # top-level options are only -h and --version
    try:
        for name, (_, summary) in COMMANDS.items():
            if name != chosen:
                subparsers.add_parser(name, help=summary)
                continue
            command = command_module(name)
            subparser = command.add_parser(subparsers)
            subparser.formatter_class = HelpFormatter
            subparser.set_defaults(run=command.run)
    except KeyboardInterrupt:  # Ctrl-C while the command's libraries load
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    if chosen and subparsers.choices[chosen].get_default("overrides") is not None:  # the commands that take --set
        subparser = subparsers.choices[chosen]
        _, typed = subparser.parse_known_args([*argv[1:], "--", "CONFIG"])  # its errors are the real parse's
        subparser.hint = set_hint(argv[1:], typed)  # ends its errors, `the following arguments are required` too
    args, unknown = parser.parse_known_args(argv)
    if args.command is None and not unknown:  # `pdmm-bridge` alone: the commands, then one error line
        parser.print_help(sys.stderr)
        parser.error("no command given: choose one of the commands above")
    if unknown:
        culprit = parser if args.command is None else subparsers.choices[args.command]
        culprit.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.argv = argv  # for commands that relaunch themselves
    if args.command != "configs":  # every other command computes (configs lists files and needs no allocator)
        importlib.import_module("pdmm").keep_freed_memory()
    try:
        return args.run(args)
    except BrokenPipeError:  # the reader of stdout went away (pdmm-bridge configs | head): stop quietly, as cat does
        if not stdout_closed():
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except UsageError as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except RunFailure as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:  # commands that keep partial work say how to resume it themselves
        print(f"{parser.prog} {args.command}: interrupted (Ctrl-C); run the same command again", file=sys.stderr)
        raise SystemExit(130) from None
    except (MemoryError, RuntimeError) as err:  # torch.OutOfMemoryError is a RuntimeError
        if not out_of_memory(err):
            raise
        print(
            f"{parser.prog} {args.command}: error: out of memory: {first_line(err)}; use a smaller size "
            "(batch, width, nodes)",
            file=sys.stderr,
        )
        raise SystemExit(1) from None
    finally:
        rundir.release_all()  # the output directories the command held (locked) are let go


def honour_sigint() -> None:
    """Make Ctrl-C (SIGINT) raise KeyboardInterrupt in every command, as in train, which sets its own handler: a
    process started with SIGINT ignored (a background job of a script: the shell ignores it there) would
    otherwise ignore a `kill -INT` to the end (docs/guide/runs.md, "Ctrl-C"). Nothing changes outside the main
    thread or where SIGINT has a handler of its own."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def set_hint(words: list[str], unknown: list[str]) -> str:
    """The end of an unrecognized-arguments error, "; config keys are set with --set train.device=cuda", for the
    options among `unknown` (argparse's unrecognized arguments) that name a key of a config's [task], [model] or
    [train] table (experiments/config.py; `--n-layer` names model.n_layer); "" when none does. The value is read
    from `words`, the command's arguments as typed: the text after "=", else the next word, VALUE when that is an
    option or there is none. It is the word typed even where argparse took it for the command's positional
    argument (`train --device cuda`: cuda became the config), docs/guide/runs.md, "The command line"."""
    keys = [(table, key) for table in TABLES for key in table_keys(table)]  # task options are the task's own keys
    unknown_options = {argument.partition("=")[0] for argument in unknown if argument.startswith("--")}
    suggestions = []
    for i, word in enumerate(words):
        if word.partition("=")[0] not in unknown_options:
            continue
        name, equals, value = word[2:].partition("=")
        if not equals:
            following = words[i + 1] if i + 1 < len(words) else "-"
            value = "VALUE" if following.startswith("-") else following
        key = name.replace("-", "_")
        suggestions += [f"--set {table}.{key}={value}" for table, field in keys if field == key]
    return f"; config keys are set with {' '.join(suggestions)}" if suggestions else ""


def stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (poll reports an error on its write end)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll on this platform, or no file descriptor
        return False


def out_of_memory(err: BaseException) -> bool:
    """Whether err is an allocation failure: MemoryError (numpy's too), torch.OutOfMemoryError (a GPU) or the
    RuntimeError of torch's CPU allocator ("... not enough memory: you tried to allocate N bytes", or on Linux
    "DefaultCPUAllocator: can't allocate memory: ..."). One line, exit 1 (docs/guide/runs.md, "Exit codes")."""
    return (
        isinstance(err, MemoryError)
        or type(err).__name__ == "OutOfMemoryError"
        or any(words in str(err).lower() for words in ("not enough memory", "out of memory", "can't allocate memory"))
    )
