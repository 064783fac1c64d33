"""`python -m shell_kernel ...`: install, uninstall, run a notebook (on one
kernel: runner.py; on many hosts: fleet.py), and the kernel itself."""

from __future__ import annotations

import argparse
import os
import sys

from .config import KernelConfig, add_options, config_from_args


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
                                       "with --ssh; -clean, -tty, -session-NAME added for "
                                       "those options)")
    install.add_argument("--display-name", metavar="TEXT", help="name shown in Jupyter")
    add_options(install)

    uninstall = commands.add_parser("uninstall", help="remove a kernelspec")
    uninstall.add_argument("name", help="kernelspec name, e.g. shell")

    kernel = commands.add_parser("kernel", help="run the kernel (kernelspecs call this)")
    add_options(kernel)

    _add_run(commands)
    _add_merge(commands)
    _add_sessions(commands)
    return parser


def _add_merge(commands) -> None:
    merge = commands.add_parser(
        "merge", help="join the output directories of `run --hosts ... --shard I/N`",
        description="Join the --output-dir of each shard of one run (run --hosts ... --shard "
                    "I/N on several machines) into one directory, as if one run had done it: "
                    "summary.json and summary.html with every host in the list's order, the "
                    "same counts and groups per cell, and the hosts' notebooks copied. "
                    "Directories of different notebooks, parameters or host lists, or holding "
                    "the same host, are refused before anything is written; the hosts of a "
                    "shard not given are skipped. Exit status: 0 every host ok, 1 not, 2 bad "
                    "usage.")
    merge.add_argument("directories", metavar="DIR", nargs="+",
                       help="a shard's --output-dir (its summary.json and host notebooks)")
    merge.add_argument("-o", "--output", metavar="OUT", required=True,
                       help="the merged directory (created if missing)")


def _add_sessions(commands) -> None:
    from .options import OPTIONS, session_name
    sessions = commands.add_parser(
        "sessions", help="list or end your named sessions (--session) on this machine or a host",
        description="List your named sessions (kernel option --session NAME) on this machine, "
                    "or with --ssh on that host: name, state (held: a kernel is attached; "
                    "detached: waiting for one; ended), when it started, when a kernel last "
                    "attached, the running cell and since when, and the size of its output "
                    "spool. --kill NAME ends one with everything it started.")
    for option in OPTIONS:
        if option.name in ("ssh", "ssh_config", "accept_new_host_key"):
            option.add_to(sessions)
    sessions.add_argument("--kill", metavar="NAME", type=session_name, help="end this session")


RUN_DESCRIPTION = """\
Execute a notebook top to bottom (through nbclient) and save it with its
outputs. Each executed code cell gets metadata.shell_kernel in the saved
notebook: exit_code, duration_s and cwd from the kernel's reply, and host
("local", or the SSH host of the kernelspec); the notebook's own
metadata.shell_kernel says where it ran (host, user, os, bash_version,
shell_kernel version, kernelspec, start time).

Parameters: each -p NAME VALUE becomes NAME='VALUE' in a new cell tagged
"injected-parameters", placed after the cell tagged "parameters" (or at the
top if there is none; an earlier injected cell is replaced), as papermill
does. Values are always strings and are quoted for bash like papermill's
BashTranslator does (shlex.quote), so spaces, quotes, $ and backticks
arrive verbatim. --parameters-yaml FILE gives lists, as bash arrays.

The first failing cell stops the run, unless it is tagged "raises-exception"
or --allow-errors is given. Progress goes to stderr, the per-cell summary to
stdout. The notebook is saved even when the run fails."""

RUN_EPILOG = """\
exit status: 0 all cells succeeded; 1 a cell failed (not tagged
raises-exception), a cell timed out or the kernel died; 2 bad usage (no such
notebook or kernel, bad -p); 3 with --fail-on-change: a cell changed since
--compare's run; 130 interrupted.

examples:
  python -m shell_kernel run notebooks/parameters.ipynb -p name 'Ada Lovelace'
  python -m shell_kernel run runbook.ipynb --kernel shell-ssh-web1 -o reports/web1.ipynb
  python -m shell_kernel run deploy.md --no-timing --compare deploy.out.ipynb -o new.ipynb
  python -m shell_kernel run runbook.ipynb --hosts 'web*' --jobs 20 --output-dir reports/"""


def _add_run(commands) -> None:
    from .options import positive
    run = commands.add_parser(
        "run", help="execute a notebook, with parameters, and save the result",
        description=RUN_DESCRIPTION, epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("notebook", metavar="NOTEBOOK",
                     help="the notebook to run: .ipynb, or a text notebook jupytext reads "
                          "(deploy.sh with '# %%%%' cells, deploy.md with ```bash fences; "
                          "needs shell_kernel[runbooks])")
    run.add_argument("-o", "--output", metavar="OUT",
                     help="where to save the executed notebook, replacing any file there "
                          "(default: NOTEBOOK with its suffix replaced by .out.ipynb, e.g. "
                          "report.ipynb -> report.out.ipynb, deploy.sh -> deploy.out.ipynb); "
                          "never NOTEBOOK itself")
    run.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append",
                     metavar=("NAME", "VALUE"),
                     help="set the bash variable NAME to the string VALUE (repeatable; "
                          "the last one for a NAME wins)")
    run.add_argument("--parameters-yaml", metavar="FILE",
                     help="set the parameters of a YAML mapping (name: value): a list becomes "
                          "a bash array, anything else a string, as papermill's -y does; "
                          "-p NAME VALUE given too wins")
    run.add_argument("--no-timing", action="store_true",
                     help="save no timestamps or durations, so that two runs of a "
                          "deterministic notebook save identical files")
    run.add_argument("--compare", metavar="PREVIOUS",
                     help="after the run, print how each code cell differs from PREVIOUS "
                          "(an earlier run's .ipynb; with --hosts, an earlier run's "
                          "--output-dir): same, output changed, status A -> B, new, removed")
    run.add_argument("--fail-on-change", action="store_true",
                     help="with --compare: exit 3 if any cell changed (a failed cell still "
                          "exits 1)")
    run.add_argument("-k", "--kernel", metavar="NAME",
                     help="kernelspec to run on (default: the one the notebook's metadata names)")
    run.add_argument("--timeout", type=positive, metavar="S",
                     help="fail a cell that runs longer than S seconds (default: no limit)")
    run.add_argument("--allow-errors", action="store_true",
                     help="run every cell even after one fails (the exit status is still 1)")
    run.add_argument("--cwd", metavar="DIR",
                     help="working directory of the kernel (default: the notebook's directory; "
                          "an SSH kernel's shell starts in the remote home all the same)")
    _add_fleet(run)


FLEET_DESCRIPTION = """\
With --hosts or --inventory the notebook runs on many hosts at once, with
no kernel: each host gets its own shell over SSH (resolved as the
SSH kernel resolves it: ssh config, ProxyJump, known_hosts, keys, agent),
runs the notebook top to bottom, stops at its first failing cell, and is
closed with nothing left on it. SHELL_KERNEL_HOST holds the host's name in
every cell. Results: DIR/<host>.ipynb, DIR/summary.json, DIR/summary.html;
and on stdout, per cell, the hosts grouped by output and exit status where
they differ (their own names made one placeholder). --shard I/N runs one of
N slices of the hosts (one per machine); `merge` joins their directories.
Exit status: 0 every host ok; 1 a host failed or was unreachable; 2 bad
usage; 130 interrupted (Ctrl-C stops every host's cell and closes every
session)."""


def _add_fleet(run) -> None:
    from .options import FLEET_JOBS, FLEET_OUTPUT_LIMIT_MB, OPTIONS, positive
    fleet = run.add_argument_group("many hosts", FLEET_DESCRIPTION)
    fleet.add_argument("--hosts", metavar="TARGETS",
                       help="comma-separated [USER@]HOST[:PORT] or ssh config aliases, @FILE "
                            "(one per line, # comments), or a pattern such as 'web*' matching "
                            "the Host names of the ssh config")
    fleet.add_argument("--inventory", metavar="FILE",
                       help="take the hosts from an Ansible inventory (needs "
                            "shell_kernel[ansible])")
    fleet.add_argument("--limit", metavar="PATTERN",
                       help="with --inventory: an Ansible host pattern, e.g. 'web:&prod'")
    fleet.add_argument("-j", "--jobs", type=int, default=FLEET_JOBS, metavar="N",
                       help=f"hosts at a time (default: {FLEET_JOBS})")
    fleet.add_argument("--output-dir", metavar="DIR",
                       help="where the host notebooks and the summaries go (default: NOTEBOOK "
                            "with .ipynb replaced by .fleet)")
    fleet.add_argument("--batch", metavar="SIZES",
                       help="roll out in batches, e.g. 5 or 1,10%%,100%% (the last size "
                            "repeats); a batch starts only while at most --max-fail hosts "
                            "have failed")
    fleet.add_argument("--max-fail", type=int, default=0, metavar="N",
                       help="failed or unreachable hosts tolerated before the next batch "
                            "(default: 0)")
    fleet.add_argument("--shard", metavar="I/N",
                       help="run only the I-th of N slices of the host list (1-based: 1/4 .. "
                            "4/4), the same slice on every machine given the same list; "
                            "`merge` joins the slices' output directories")
    fleet.add_argument("--durable", action="store_true",
                       help="give each host a durable shell, which a dropped connection "
                            "does not end (the runner reattaches), at the cost of more "
                            "processes per host; by default a host's shell ends with its "
                            "connection, and a host that drops is failed")
    fleet.add_argument("--output-limit-mb", type=positive, metavar="MB",
                       help="output of one cell kept in a host's notebook, and in the "
                            "runner's memory until then; the rest goes to a file in "
                            "DIR/<host>.output/, which the notebook names (default: "
                            f"{FLEET_OUTPUT_LIMIT_MB:g}, so that many hosts at once fit "
                            "in memory)")
    for option in OPTIONS:
        if option.name in ("ssh_config", "accept_new_host_key", "clean"):
            option.add_to(fleet)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command != "kernel" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "run":
        return _run_notebook(args)
    if args.command == "merge":
        return _merge(args)
    if args.command == "sessions":
        from .sessions_command import main_sessions
        return main_sessions(args)

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


def _run_notebook(args) -> int:
    """`run`: on one kernel, or with --hosts or --inventory on many hosts."""
    light_notebook_validation(hosts=args.hosts is not None or args.inventory is not None)
    from .notebook_job import EXIT_USAGE, RunError, check_parameter_name

    try:
        parameters: dict[str, str | list[str]] = {}
        if args.parameters_yaml is not None:
            from .parameter_files import read_parameters_yaml
            parameters.update(read_parameters_yaml(args.parameters_yaml))
        for name, value in args.parameters or []:
            parameters[check_parameter_name(name)] = value
        if args.fail_on_change and args.compare is None:
            raise RunError("--fail-on-change needs --compare PREVIOUS: the run to compare with")
        if args.hosts is not None or args.inventory is not None:
            return _run_fleet(args, parameters)
        misplaced = _fleet_only_flags(args)
        if misplaced:
            raise RunError(f"{', '.join(misplaced)}: only with --hosts or --inventory")
        return _run_one(args, parameters)
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE


def _merge(args) -> int:
    from pathlib import Path

    from .fleet_merge import merge
    from .notebook_job import EXIT_USAGE, RunError
    try:
        return merge([Path(directory) for directory in args.directories], Path(args.output))
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE


def _run_one(args, parameters: dict[str, str]) -> int:
    from pathlib import Path

    from .notebook_job import RunError
    from .runner import RunOptions, default_output, run

    notebook = Path(args.notebook)
    options = RunOptions(
        notebook=notebook, output=Path(args.output) if args.output else default_output(notebook),
        parameters=parameters, kernel_name=args.kernel, timeout=args.timeout,
        allow_errors=args.allow_errors, cwd=Path(args.cwd) if args.cwd else None,
        timing=not args.no_timing, compare=Path(args.compare) if args.compare else None,
        fail_on_change=args.fail_on_change)
    if options.output.absolute() == notebook.absolute():
        raise RunError(f"-o {args.output}: the output would overwrite the notebook itself")
    return run(options)


#: jsonschema's optional format checkers (the modules its _format.py imports
#: if installed) that are format checkers and nothing else.
UNUSED_FORMAT_CHECKERS = ("rfc3987_syntax", "isoduration", "rfc3986_validator",
                          "rfc3339_validator", "webcolors", "uri_template", "fqdn")


def light_notebook_validation(hosts: bool = False) -> None:
    """Before nbformat is imported, for a process that checks a notebook and
    runs it (`run`; with hosts, `run --hosts` and bench/lean_runner.py)."""
    # nbformat validates with jsonschema, whose import imports every optional
    # format checker that is installed, and no notebook schema has a "format"
    # (tests/unit/test_cli.py holds nbformat's to that): rfc3987_syntax (which
    # jupyter-events requires) builds an IRI grammar for 0.75-2.5 s of CPU,
    # most of a `run`'s start-up; isoduration imports arrow (30-100 ms); the
    # others compile URI and date patterns (15 ms together). An entry of None
    # makes that optional import fail at once. (idna and jsonpointer, general
    # libraries that cost little, are left alone.)
    for unused_format_checker in UNUSED_FORMAT_CHECKERS:
        sys.modules.setdefault(unused_format_checker, None)
    if hosts:
        # And nbformat validates with fastjsonschema where it is installed,
        # whose validator is Python code generated from the schema and
        # compiled: 30-50 ms before the first host starts, to check one
        # notebook once, where jsonschema takes 2-3 ms. (A user's own choice
        # stands.) Not for a kernel's `run`: the kernel inherits this
        # environment, and so would its cells.
        os.environ.setdefault("NBFORMAT_VALIDATOR", "jsonschema")


def _run_fleet(args, parameters: dict[str, str]) -> int:
    import logging
    from pathlib import Path

    from .fleet_targets import HostsError, hosts_from_inventory, hosts_from_list
    from .notebook_job import RunError, output_stem
    from .options import FLEET_OUTPUT_LIMIT_MB

    for flag, value in (("-o", args.output), ("--kernel", args.kernel), ("--cwd", args.cwd)):
        if value is not None:
            raise RunError(f"{flag} is for one kernel; with --hosts each host's notebook goes "
                           "to --output-dir DIR/<host>.ipynb and runs in the host's home")
    if args.hosts is not None and args.inventory is not None:
        raise RunError("give either --hosts or --inventory, not both")
    if args.limit is not None and args.inventory is None:
        raise RunError("--limit selects hosts of an --inventory; give one")
    if args.max_fail and not args.batch:
        raise RunError("--max-fail decides whether the next --batch starts; give --batch too")
    try:
        if args.inventory is not None:
            hosts = hosts_from_inventory(args.inventory, args.limit)
        else:
            hosts = hosts_from_list(args.hosts, args.ssh_config)
    except HostsError as err:
        raise RunError(str(err)) from None
    shard = None
    if args.shard is not None:
        from .fleet_shards import select
        hosts, shard = select(hosts, args.shard)
    from .fleet import FleetOptions, run_fleet

    notebook = Path(args.notebook)
    config = KernelConfig(ssh_config=args.ssh_config, accept_new_host_key=args.accept_new_host_key,
                          ephemeral=not args.durable, clean=args.clean,
                          output_limit_mb=args.output_limit_mb or FLEET_OUTPUT_LIMIT_MB)
    if not log_to_file():
        # A host's trouble is in its report; tracebacks of a hundred hosts on
        # the terminal would bury the progress display.
        logging.getLogger("shell_kernel").addHandler(logging.NullHandler())
    return run_fleet(FleetOptions(
        notebook=notebook, hosts=hosts, parameters=parameters, jobs=args.jobs,
        output_dir=(Path(args.output_dir) if args.output_dir
                    else notebook.with_name(output_stem(notebook) + ".fleet")),
        batch=args.batch, max_fail=args.max_fail, timeout=args.timeout,
        allow_errors=args.allow_errors, shard=shard, timing=not args.no_timing,
        compare=Path(args.compare) if args.compare else None,
        fail_on_change=args.fail_on_change, config=config))


def _fleet_only_flags(args) -> list[str]:
    """The flags given that mean something only with --hosts or --inventory."""
    from .options import FLEET_JOBS

    given = [("--limit", args.limit), ("--output-dir", args.output_dir), ("--batch", args.batch),
             ("--shard", args.shard),
             ("--max-fail", args.max_fail), ("--jobs", args.jobs != FLEET_JOBS),
             ("--ssh-config", args.ssh_config), ("--accept-new-host-key", args.accept_new_host_key),
             ("--durable", args.durable), ("--clean", args.clean),
             ("--output-limit-mb", args.output_limit_mb is not None)]
    return [flag for flag, value in given if value]


def log_to_file() -> bool:
    """SHELL_KERNEL_LOG=FILE, a debugging aid: the session's decisions, one line
    each, go to FILE. True if they do."""
    import logging
    import os

    log_file = os.environ.get("SHELL_KERNEL_LOG")
    if log_file:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s: %(message)s"))
        logger = logging.getLogger("shell_kernel")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    return bool(log_file)


def _run_kernel(config, ipykernel_argv: list[str]) -> int:
    from .early_ports import EarlyPorts
    early_ports = EarlyPorts.open(ipykernel_argv)  # first: clients are connecting already
    log_to_file()

    # The shell starts before ipykernel is even imported (and before it sets
    # SIGINT to ignored, which a shell started later would inherit).
    from .launch import ShellLaunch
    launch = ShellLaunch(config)

    from . import compat
    from .kernel import ShellKernel

    ShellKernel.launch = launch
    compat.launch_kernel(ipykernel_argv, ShellKernel, early_ports)
    return 0
