"""The `emu` command line: discovers subcommands and turns user errors into one line."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import __version__, commands
from .errors import EmuError
from .memory import return_large_frees
from .outputs import Terminated, describe_os_error, exit_status, install_signal_handlers, signal_of


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the option and the problem), exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="emu",
        description="Trace-driven emulator of an FPGA compute-NIC cluster for long-context LLM inference.",
    )
    parser.add_argument("--version", action="version", version=f"mcf-emu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    install_signal_handlers()
    return_large_frees()  # a large trace's and tables' temporaries leave no heap behind
    try:
        status = args.func(args)
    except EmuError as exc:
        print(f"emu {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated, SystemError) as exc:
        sig = signal_of(exc)
        if sig is None:
            raise
        what = "interrupted (SIGINT)" if isinstance(sig, KeyboardInterrupt) else f"terminated ({sig})"
        print(f"emu {args.command}: {what}; unfinished output removed", file=sys.stderr)
        return exit_status(sig)
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the machine refused: a full disk, a read-only mount, a path under a file
        print(f"emu {args.command}: error: {describe_os_error(exc)}", file=sys.stderr)
        return 2
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
