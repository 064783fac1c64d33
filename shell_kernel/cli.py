"""`python -m shell_kernel ...`: install, uninstall, run a notebook, and the kernel itself."""

from __future__ import annotations

import argparse
import sys

from .config import add_options, config_from_args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m shell_kernel",
                                     description="A Jupyter kernel running one persistent bash.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    install = commands.add_parser("install", help="write a kernelspec")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="in your home directory")
    where.add_argument("--sys-prefix", action="store_true",
                       help="in this Python's prefix (e.g. the active virtualenv)")
    where.add_argument("--prefix", metavar="DIR", help="under DIR/share/jupyter/kernels")
    install.add_argument("--name", help="kernelspec name (default: shell, or shell-ssh-HOST "
                                       "with --ssh)")
    install.add_argument("--display-name", metavar="TEXT", help="name shown in Jupyter")
    add_options(install)

    uninstall = commands.add_parser("uninstall", help="remove a kernelspec")
    uninstall.add_argument("name", help="kernelspec name, e.g. shell")

    kernel = commands.add_parser("kernel", help="run the kernel (kernelspecs call this)")
    add_options(kernel)

    _add_run(commands)
    return parser


RUN_DESCRIPTION = """\
Execute a notebook top to bottom (through nbclient) and save it with its
outputs. Each executed code cell gets metadata.shell_kernel in the saved
notebook: exit_code, duration_s and cwd from the kernel's reply, and host
("local", or the SSH host of the kernelspec).

Parameters: each -p NAME VALUE becomes NAME='VALUE' in a new cell tagged
"injected-parameters", placed after the cell tagged "parameters" (or at the
top if there is none; an earlier injected cell is replaced), as papermill
does. Values are always strings and are quoted for bash like papermill's
BashTranslator does (shlex.quote), so spaces, quotes, $ and backticks
arrive verbatim.

The first failing cell stops the run, unless it is tagged "raises-exception"
or --allow-errors is given. Progress goes to stderr, the per-cell summary to
stdout. The notebook is saved even when the run fails."""

RUN_EPILOG = """\
exit status: 0 all cells succeeded; 1 a cell failed (not tagged
raises-exception), a cell timed out or the kernel died; 2 bad usage (no such
notebook or kernel, bad -p); 130 interrupted.

examples:
  python -m shell_kernel run notebooks/parameters.ipynb -p name 'Ada Lovelace'
  python -m shell_kernel run runbook.ipynb --kernel shell-ssh-web1 -o reports/web1.ipynb"""


def _add_run(commands) -> None:
    run = commands.add_parser(
        "run", help="execute a notebook, with parameters, and save the result",
        description=RUN_DESCRIPTION, epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("notebook", metavar="NOTEBOOK", help="the .ipynb file to run")
    run.add_argument("-o", "--output", metavar="OUT",
                     help="where to save the executed notebook, replacing any file there "
                          "(default: NOTEBOOK with .ipynb replaced by .out.ipynb, e.g. "
                          "report.ipynb -> report.out.ipynb); never NOTEBOOK itself")
    run.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append",
                     metavar=("NAME", "VALUE"),
                     help="set the bash variable NAME to the string VALUE (repeatable; "
                          "the last one for a NAME wins)")
    run.add_argument("-k", "--kernel", metavar="NAME",
                     help="kernelspec to run on (default: the one the notebook's metadata names)")
    run.add_argument("--timeout", type=_seconds, metavar="S",
                     help="fail a cell that runs longer than S seconds (default: no limit)")
    run.add_argument("--allow-errors", action="store_true",
                     help="run every cell even after one fails (the exit status is still 1)")
    run.add_argument("--cwd", metavar="DIR",
                     help="working directory of the kernel (default: the notebook's directory; "
                          "an SSH kernel's shell starts in the remote home all the same)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command != "kernel" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "run":
        from .runner import main_run
        return main_run(args)

    try:
        config = None if args.command == "uninstall" else config_from_args(args)
    except ValueError as err:
        parser.error(str(err))
    if args.command == "kernel":
        return _run_kernel(config, rest)

    from .install import InstallError, default_display_name, default_name, install, uninstall
    try:
        if args.command == "install":
            name = args.name or default_name(config)
            path = install(config, name, args.display_name or default_display_name(config),
                           user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix)
            print(f"Installed kernelspec {name} in {path}")
        else:
            path = uninstall(args.name)
            print(f"Removed kernelspec {args.name} from {path}")
    except InstallError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def _run_kernel(config, ipykernel_argv: list[str]) -> int:
    import logging
    import os

    log_file = os.environ.get("SHELL_KERNEL_LOG")
    if log_file:  # a debugging aid: the session's decisions, one line each
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s: %(message)s"))
        logger = logging.getLogger("shell_kernel")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)

    # The shell starts before ipykernel is even imported (and before it sets
    # SIGINT to ignored, which a shell started later would inherit).
    from .launch import ShellLaunch
    launch = ShellLaunch(config)

    from ipykernel.kernelapp import IPKernelApp

    from .kernel import ShellKernel

    ShellKernel.launch = launch
    IPKernelApp.launch_instance(argv=ipykernel_argv, kernel_class=ShellKernel)
    return 0
