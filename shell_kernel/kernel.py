"""The Jupyter side: protocol messages in, ShellSession calls out.

Nothing here knows bash syntax; everything here knows Jupyter messages.
What the first kernel_info reply does not need (the session, results,
prompts) is imported where it is used: the shell starts meanwhile, and the
reply does not wait for those imports (see launch.py).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from typing import TYPE_CHECKING

from ipykernel import kernel_protocol_version
from ipykernel.kernelbase import Kernel

from . import __version__, compat, history
from .completion import Completer, continuation, word_at
from .config import KernelConfig
from .launch import ShellLaunch
from .startup import still_starting

if TYPE_CHECKING:
    from .prompts import Prompt
    from .session import CellRecord

log = logging.getLogger("shell_kernel.kernel")

#: How long a completion may take (a slow completion function is then
#: interrupted, and the shell's state is as it was): the kernel answers no
#: other request meanwhile.
COMPLETION_SECONDS = 3.0

#: A cell that waits this long for the shell's start says so (and how long).
STARTING_QUIET_S = 1.0


class ShellKernel(compat.AbortHook, Kernel):
    implementation = "shell_kernel"
    implementation_version = __version__
    #: Set by the launcher before the kernel application creates the kernel:
    #: the shell is already starting (see launch.py).
    launch: ShellLaunch | None = None

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Before a shell starts here (if the launcher did not start one): a
        # shell started while ipykernel ignores SIGINT could never be interrupted.
        self._install_sigint_handler()
        self._launch = type(self).launch or ShellLaunch(KernelConfig())
        self._completer = Completer(
            lambda what, text: self._launch.query(what, text, COMPLETION_SECONDS))
        self._output_parent: dict | None = None
        #: ipykernel pauses this long before each execute_reply, so that what a
        #: cell sent on IOPub reaches the frontend first: only a cell that sent
        #: something waits (see do_execute).
        self._output_pause = compat.reply_pause(self)
        self._output_sent = False  # by the running cell (any thread sends)
        self._display_ids: set[str] = set()
        self._idle = threading.Event()  # no cell is running
        self._idle.set()
        #: Why the shell did not start, while the cells queued behind the
        #: cell that reported it are answered (see _send_abort_reply).
        self._start_failure: str | None = None
        self._stop_waiting = threading.Event()  # Stop while a cell waits for the start
        self._launch.bind(self._send_stream, self._send_display, self._send_clear)

    def _wait_started(self) -> bool:
        """Wait for the shell's start to end, up or failed, however long it
        takes: past its timeout, a failed start is still ending (its shell
        being closed, slow on a busy host), and the cell must report its
        error (take_error), not go on to start the shell again. A cell that
        waits longer than STARTING_QUIET_S (slow startup files) shows that,
        with the time so far, until the start ends; Stop ends the wait
        (False: the cell is not run)."""
        launch = self._launch
        if launch.started.is_set():
            return True
        where = f" on {launch.config.ssh}" if launch.config.ssh else ""
        display_id = None
        show_at = time.monotonic() + STARTING_QUIET_S
        self._stop_waiting.clear()
        while not launch.wait_started(0.1):
            now = time.monotonic()
            if self._stop_waiting.is_set():
                return False
            if now >= show_at:
                display_id = display_id or f"shell-kernel-start-{uuid.uuid4().hex}"
                self._send_display("text/plain", still_starting(
                    now - launch.started_at, launch.config.start_timeout, where).encode(),
                    display_id)
                show_at = now + 1.0
        if display_id is not None and launch.info is not None:
            self._send_clear(wait=False)  # a progress line: gone once the shell is up
        return True

    @property
    def banner(self) -> str:
        # kernel_info is answered at once, whatever the shell's startup files do.
        info = self._launch.info
        if not self._launch.started.is_set():
            version = "(starting)"
        else:
            version = info.bash_version if info is not None else "(not started)"
        return (f"shell_kernel {__version__}: a persistent bash {version} "
                f"({self._launch.description}).\nEach cell runs in the same shell; "
                "a non-zero exit status makes the cell an error.")

    @property
    def language_info(self) -> dict:
        return {
            "name": "bash",
            "version": self._bash_version(),
            "mimetype": "text/x-sh",
            "file_extension": ".sh",
            "codemirror_mode": "shell",
            "pygments_lexer": "bash",
        }

    def _bash_version(self) -> str:
        info = self._launch.info
        return info.bash_version if info is not None else self._launch.bash_version()

    async def kernel_info_request(self, stream, ident, parent):
        await super().kernel_info_request(stream, ident, parent)
        self._launch.go()  # the reply is out: the session may take the interpreter now

    @property
    def kernel_info(self) -> dict:
        # Not the base class's: it imports ipykernel.debugger, and with it debugpy
        # (tens of milliseconds, and a warning in jupyter console), to offer a
        # debugger; a shell has neither a debugger nor kernel subshells.
        return {
            "protocol_version": kernel_protocol_version,
            "implementation": self.implementation,
            "implementation_version": self.implementation_version,
            "language_info": self.language_info,
            "banner": self.banner,
            "help_links": self.help_links,
            "supported_features": [],
        }

    # -------------------------------------------------------------- signals
    def _install_sigint_handler(self) -> None:
        # With interrupt_mode "message" interrupts arrive on the control
        # channel; a stray SIGINT (a terminal Ctrl-C, a client in signal mode)
        # means the same thing and must never raise inside the kernel.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame) -> None:
        log.debug("SIGINT received")
        self._stop_waiting.set()
        self._launch.interrupt()

    def pre_handler_hook(self) -> None:
        """The base class arms KeyboardInterrupt here; a shell kernel must not."""

    def post_handler_hook(self) -> None:
        """See pre_handler_hook."""

    async def interrupt_request(self, stream, ident, parent):
        log.debug("interrupt_request received")
        self._stop_waiting.set()
        self._launch.interrupt()
        self.session.send(stream, "interrupt_reply", {"status": "ok"}, parent, ident=ident)

    # -------------------------------------------------------------- execute
    def _publish(self, msg_type: str, content: dict) -> None:
        """Send an output message of the current cell on IOPub (any thread)."""
        parent = self._output_parent
        if parent is None:
            return
        self._output_sent = True
        self.session.send(self.iopub_socket, msg_type, content, parent=parent,
                          ident=compat.topic(self, msg_type))

    def _send_stream(self, name: str, text: str) -> None:
        if text:
            self._publish("stream", {"name": name, "text": text})

    def _send_clear(self, wait: bool = True) -> None:
        """The cell cleared its screen: clear its output when the next arrives
        (wait=True, so that a loop that clears and reprints does not flicker)."""
        self._publish("clear_output", {"wait": wait})

    def _send_display(self, mime: str, data: bytes, display_id: str) -> None:
        if self._output_parent is None:
            return
        from .results import UnknownDisplay, display_bundle
        try:
            bundle = display_bundle(mime, data)
        except UnknownDisplay as err:
            self._send_stream("stderr", str(err))
            return
        msg_type, transient = "display_data", {}
        if display_id:
            transient["display_id"] = display_id
            if display_id in self._display_ids:
                msg_type = "update_display_data"
            self._display_ids.add(display_id)
        self._publish(msg_type, {"data": bundle, "metadata": {}, "transient": transient})

    def _ask(self, prompt: Prompt) -> str | None:
        """Ask the frontend (input_request) and return its answer; None once
        the question is moot (see compat.ask_input)."""
        return compat.ask_input(self, prompt.text, prompt.password, prompt.over)

    # -------------------------------------------------------- editing help
    async def do_complete(self, code, cursor_pos):
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        matches, start = self._completer.complete(code, cursor_pos)
        return {"status": "ok", "matches": matches, "cursor_start": start,
                "cursor_end": cursor_pos, "metadata": {}}

    async def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
        word = word_at(code, len(code) if cursor_pos is None else cursor_pos)
        answer = self._launch.query("inspect", word) if word else None
        found = bool(answer) and "not found" not in answer.split("\n", 1)[0]
        data = {"text/plain": answer.rstrip("\n")} if found else {}
        return {"status": "ok", "found": found, "data": data, "metadata": {}}

    async def do_is_complete(self, code):
        if not code.strip():
            return {"status": "complete"}
        answer = self._launch.query("is-complete", code)
        if answer is None:
            return {"status": "unknown"}
        if not answer.strip():
            return {"status": "complete"}
        return continuation(answer)

    async def do_history(self, hist_access_type, output, raw, session=None, start=None,
                         stop=None, n=None, pattern=None, unique=False, **_ignored):
        """The shell's own history list (see history.py); raw or not, a
        cell's text is what ran."""
        listing = self._launch.query("history", "")
        entries = history.parse(listing) if listing else []
        return {"status": "ok", "history": history.answer(
            entries, hist_access_type, output=output, session=session, start=start,
            stop=stop, n=n, pattern=pattern, unique=unique)}

    async def do_execute(self, code, silent, store_history=True, user_expressions=None,
                         allow_stdin=False, *, cell_meta=None, cell_id=None):
        self._output_parent = self.get_parent("shell")
        self._output_sent = False
        self._start_failure = None
        self._user_expressions = user_expressions or {}
        reply = self._execute(code, silent, allow_stdin)
        compat.set_reply_pause(self, self._output_pause if self._output_sent else 0.0)
        return reply

    def _execute(self, code: str, silent: bool, allow_stdin: bool) -> dict:
        started = time.monotonic()
        if not self._wait_started():
            meta = {"exit_code": 130, "duration_s": round(time.monotonic() - started, 6),
                    "interrupted": True}
            return self._error_reply("KeyboardInterrupt", "130", meta, silent,
                                     "Interrupted while the shell was starting: this cell "
                                     "did not run (exit status 130)")
        not_started = self._launch.take_error()
        if not_started is not None:
            # Reported once, here; the cells queued behind this one fail with it.
            self._start_failure = str(not_started)
            meta = {"exit_code": None, "duration_s": round(time.monotonic() - started, 6)}
            return self._error_reply("ShellUnavailable", str(not_started), meta, silent)
        from .session import SessionError
        self._idle.clear()
        try:
            result = self._launch.session.run(code, self._ask if allow_stdin else None)
        except SessionError as err:
            meta = {"exit_code": None, "duration_s": round(time.monotonic() - started, 6)}
            return self._error_reply("ShellUnavailable", str(err), meta, silent)
        except Exception as err:  # noqa: BLE001 - every execute_request gets a reply
            log.exception("running a cell failed")
            meta = {"exit_code": None, "duration_s": round(time.monotonic() - started, 6)}
            return self._error_reply(
                "KernelError", f"shell_kernel failed while running this cell ({type(err).__name__}: "
                f"{err}). This is a bug; the shell may have lost its state. Please report it "
                "with the kernel log (set SHELL_KERNEL_LOG=FILE).", meta, silent)
        finally:
            self._idle.set()
        return self._reply_for(result, silent)

    def _reply_for(self, result: CellRecord, silent: bool) -> dict:
        from .failure import cell_error
        from .named_sessions import session_cell
        from .results import reply_metadata
        meta = reply_metadata(result)
        if result.detached:
            name = self._launch.config.session
            meta["session"] = name
            cell = session_cell(self._launch.session.seq, name)
            text = (f"The kernel detached from session {name}, which keeps running this cell "
                    f"({cell}): the next kernel started with "
                    f"--session {name} shows the rest of its output and its exit status.")
            return self._error_reply("Detached", text, meta, silent)
        error = cell_error(result)
        if error is not None:
            return self._error_reply(*error[:2], meta, silent, error[2])
        self._reply_metadata = meta
        return {"status": "ok", "execution_count": self.execution_count,
                "payload": [], "user_expressions": self._unsupported_expressions()}

    def _unsupported_expressions(self) -> dict:
        """The protocol wants one result per requested expression; a shell has none."""
        return {name: {"status": "error", "ename": "NotSupported", "traceback": [],
                       "evalue": "shell_kernel does not evaluate user_expressions"}
                for name in getattr(self, "_user_expressions", {})}

    def _error_reply(self, ename: str, evalue: str, meta: dict, silent: bool,
                     summary: str | None = None) -> dict:
        from .results import error_content
        self._reply_metadata = meta
        content = error_content(ename, evalue, summary)
        if not silent:
            self._publish("error", content)
        return {"status": "error", "execution_count": self.execution_count, **content}

    def init_metadata(self, parent):
        self._reply_metadata = {}
        return super().init_metadata(parent)

    def finish_metadata(self, parent, metadata, reply_content):
        metadata = super().finish_metadata(parent, metadata, reply_content)
        if reply_content.get("status") == "aborted":
            return metadata  # never ran (queued behind a failed cell): no record of ours
        # host as `run` records it: "local", or the SSH target of the kernelspec.
        metadata["shell_kernel"] = {**self._reply_metadata,
                                    "host": self._launch.config.ssh or "local"}
        return metadata

    def abort_reply(self, stream, msg, idents) -> bool:
        """ipykernel skips ("aborts") the cells queued behind a failed one.
        Behind a shell that did not start they fail at once with the same
        error instead: each would otherwise have waited for a start of its own."""
        failure = self._start_failure
        if failure is None or msg["header"]["msg_type"] != "execute_request":
            return False
        content = msg["content"]
        silent = content.get("silent", False)
        if not silent:
            self.execution_count += 1
            compat.publish_execute_input(self, content.get("code", ""), msg, self.execution_count)
        metadata = self.init_metadata(msg)
        from .results import error_content
        self._reply_metadata = {"exit_code": None, "duration_s": 0.0}
        error = error_content("ShellUnavailable", failure)
        if not silent:
            self.session.send(self.iopub_socket, "error", error, parent=msg,
                              ident=compat.topic(self, "error"))
        reply = {"status": "error", "execution_count": self.execution_count, **error}
        metadata = self.finish_metadata(msg, metadata, reply)
        self.session.send(stream, "execute_reply", reply, parent=msg, metadata=metadata,
                          ident=idents)
        return True

    # ------------------------------------------------------------- shutdown
    async def do_shutdown(self, restart):
        cell_running = not self._idle.is_set()
        self._launch.close()
        if cell_running:
            # Let the cell that the shutdown cut short send its reply while
            # the sockets still exist (it goes out just after do_execute).
            self._idle.wait(1.0)
            time.sleep(0.05)
        return {"status": "ok", "restart": restart}

    async def shutdown_request(self, stream, ident, parent):
        """ipykernel's, except for when the main loop is stopped.

        ipykernel stops it from inside this handler: the main thread then
        closes the IOPub thread while the control thread still flushes
        stdout and publishes "idle" through it, and when it loses that race
        it blocks for ever and jupyter_client kills the kernel with SIGTERM
        after 2.5 s. Here the loops stop from the control loop's next turn,
        once this message is completely handled."""
        content = await self.do_shutdown(parent["content"]["restart"])
        self.session.send(stream, "shutdown_reply", content, parent, ident=ident)
        await compat.announce_shutdown(self, content, parent)
        loops = {self.io_loop}
        if self.shell_stream is not None:
            loops.add(self.shell_stream.io_loop)
        control_loop = self.control_stream.io_loop if self.control_stream else None

        def stop_loops() -> None:
            for loop in loops - {control_loop}:
                loop.add_callback(loop.stop)
            if control_loop is not None:
                control_loop.stop()

        if control_loop is not None:
            control_loop.add_callback(stop_loops)
        else:
            stop_loops()
