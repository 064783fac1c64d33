"""The SSH backend: bash on a remote host over one paramiko connection
(backend.SSHBackend, a transport for the channel layer). target.py resolves
`[USER@]HOST[:PORT]` through ssh_config; connect.py makes the connection
(auth.py, known_hosts.py, proxy_command.py as OpenSSH does them);
terminal.py is the prompt terminal on the host.

Threads: connecting runs on the session's caller (or launch) thread;
`shell-kernel-ssh-reader` reads the shell's channel, `shell-kernel-ssh-side`
opens the side shell, `shell-kernel-ssh-keepalive` pings the connection,
`shell-kernel-ssh-terminal` reads the prompt terminal.
"""

import importlib
import importlib.util
import sys
import types


class _DeferredInvoke(types.ModuleType):
    """Stands for invoke in sys.modules until something reads from it, then
    imports it and hands over. paramiko.config imports invoke as it loads,
    for `Match exec` alone: a tenth of what `run --hosts` costs before its
    first host (43 ms). (importlib.util.LazyLoader cannot do this before
    Python 3.12: `import` reads the module's __spec__, which loads it.)"""

    def __getattr__(self, name: str):
        if sys.modules.get("invoke") is self:
            del sys.modules["invoke"]
        return getattr(importlib.import_module("invoke"), name)


def _defer_invoke() -> None:
    # (This package's modules import paramiko: this runs before any of them.)
    if "invoke" not in sys.modules and importlib.util.find_spec("invoke") is not None:
        sys.modules["invoke"] = _DeferredInvoke("invoke")


_defer_invoke()
