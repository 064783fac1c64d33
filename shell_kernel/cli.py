"""`python -m shell_kernel ...`: install, uninstall, and the kernel itself."""

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
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command != "kernel" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

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

    from ipykernel.kernelapp import IPKernelApp

    log_file = os.environ.get("SHELL_KERNEL_LOG")
    if log_file:  # a debugging aid: the session's decisions, one line each
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s: %(message)s"))
        logger = logging.getLogger("shell_kernel")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)

    from .kernel import ShellKernel

    ShellKernel.config_for_launch = config
    IPKernelApp.launch_instance(argv=ipykernel_argv, kernel_class=ShellKernel)
    return 0
