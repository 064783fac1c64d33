"""A notebook on many hosts with this product's host side (its login bash,
session script, cell lines, frames, close) and its notebook writer, but
without its session engine: what `run --hosts` would cost with a runner
that does only that work. bench/structure_cost.py runs it beside the real one.

    python bench/lean_runner.py --shape lean|threads [--pump caller] [--sends pump]
        [--reader paramiko] HOSTS SSH_CONFIG NOTEBOOK OUTDIR

--shape lean: one thread a host does everything, a cell at a time (its
lines, then its output up to its end frame), as a synchronous runner would.
--shape threads: the same work in the engine's shape: per host an I/O
thread (the login and every send), a reader thread (the channel's data to
a queue), a pump thread (frames, the cell's end) and the caller (the
notebook), with a queue or a future between each. The difference between
the two is what handing work between a session's threads costs; --pump,
--sends and --reader take one thread out of the chain at a time.

Prints "ok N" (hosts whose every cell ended with its end frame).
"""

from __future__ import annotations

import argparse
import copy
import queue
import secrets
import shlex
import threading
from concurrent.futures import Future
from pathlib import Path

from shell_kernel.cli import light_notebook_validation

light_notebook_validation(hosts=True)  # as `run --hosts` does

import nbformat  # noqa: E402

from shell_kernel import frames, notebook_json, protocol, provenance  # noqa: E402
from shell_kernel.backends import bash_argv  # noqa: E402
from shell_kernel.backends.ssh.connect import connect  # noqa: E402
from shell_kernel.backends.ssh.target import resolve  # noqa: E402

LOGIN = "exec " + shlex.join(bash_argv("bash", clean=False, completion=False))
READ_SIZE = 65536
READ_WAIT_S = 10.0


class Host:
    """One host's session: the connection, the shell's channel, the cells'
    output as the frames split it."""

    def __init__(self, name: str, config: str):
        self.token = secrets.token_hex(8)
        self.clients = connect(resolve(name, config))
        self.channel = self.clients[-1].get_transport().open_session()
        self.channel.exec_command(LOGIN)
        self.channel.sendall(protocol.bootstrap_lines(protocol.session_script(self.token,
                                                                              queries=False))
                             + protocol.stdin_line(None))
        self.scanners = {"stdout": frames.FrameScanner(self.token),
                         "stderr": frames.FrameScanner(self.token, "stderr")}
        self.text: dict[str, list[bytes]] = {}
        self.seq = 0

    def cell_lines(self, source: str) -> bytes:
        self.seq += 1
        self.text = {"stdout": [], "stderr": []}
        return protocol.eval_lines(protocol.prepare_cell(source).source, self.seq)

    def read(self) -> tuple[str, bytes]:
        """The next data of either stream (b"": the channel ended)."""
        if self.channel.recv_stderr_ready():
            return "stderr", self.channel.recv_stderr(READ_SIZE)
        return "stdout", self.channel.recv(READ_SIZE)

    def take(self, stream: str, data: bytes) -> frames.EndFrame | None:
        """Output of the running cell: its end frame when it came."""
        for item in self.scanners[stream].feed(data):
            if isinstance(item, bytes):
                self.text[stream].append(item)
            elif (isinstance(item, frames.EndFrame) and item.stream == "stdout"
                  and item.seq == self.seq):
                return item
        return None

    def close_lines(self) -> bytes:
        return protocol.close_line(secrets.token_hex(8))

    def disconnect(self) -> None:
        self.channel.shutdown_write()
        while self.channel.recv(READ_SIZE):
            pass
        for client in self.clients:
            client.close()


def run_notebook(host: Host, nb, run_cell) -> bool:
    """The provenance cell, then the notebook's cells until one fails:
    run_cell(lines) gives the cell's end frame (None: the channel ended)."""
    sources = [provenance.PROBE] + [cell.source for cell in nb.cells]
    for index, source in enumerate(sources):
        end = run_cell(host.cell_lines(source))
        if end is None:
            return False
        if index:
            cell = nb.cells[index - 1]
            cell.outputs = [nbformat.v4.new_output("stream", name=stream,
                                                   text=b"".join(text).decode(errors="replace"))
                            for stream, text in host.text.items() if text]
            cell.metadata["shell_kernel"] = {"exit_code": end.status}
            if end.status:
                break
    return True


def lean(name: str, config: str, nb) -> bool:
    host = Host(name, config)

    def run_cell(lines: bytes) -> frames.EndFrame | None:
        host.channel.sendall(lines)
        while True:
            stream, data = host.read()
            if not data:
                return None
            if (end := host.take(stream, data)) is not None:
                return end

    ok = run_notebook(host, nb, run_cell)
    host.channel.sendall(host.close_lines())
    host.disconnect()
    return ok


class Worker:
    """A thread running calls in turn, each answered on a future."""

    def __init__(self):
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while (item := self.calls.get()) is not None:
            call, answer = item
            try:
                answer.set_result(call())
            except Exception as err:  # noqa: BLE001 - the caller's to see
                answer.set_exception(err)

    def submit(self, call) -> Future:
        answer: Future = Future()
        self.calls.put((call, answer))
        return answer


def threads(name: str, config: str, nb, pump_on: str, sends_on: str, reader_on: str) -> bool:
    io = Worker()
    host = io.submit(lambda: Host(name, config)).result()
    events: queue.SimpleQueue = queue.SimpleQueue()
    running: list[Future] = []

    def handle(event) -> None:
        kind, payload = event
        if kind == "begin":
            lines, answer = payload
            running[:] = [answer]
            if sends_on == "pump":
                host.channel.sendall(lines)
            else:
                io.submit(lambda: host.channel.sendall(lines))
        elif kind == "data":
            if running and (end := host.take(*payload)) is not None:
                running.pop().set_result(end)
        elif running:  # the channel ended
            running.pop().set_result(None)

    def pump() -> None:
        while (event := events.get()) is not None:
            handle(event)

    def reader() -> None:
        while True:
            stream, data = host.read()
            if not data:
                events.put(("ended", None))
                return
            events.put(("data", (stream, data)))

    if reader_on == "paramiko":
        # paramiko's thread puts the data on the queue as it arrives; the
        # window is given back at once, and a channel that closes mid-cell
        # is not noticed (a benchmark's shortcuts: the engine would give the
        # window back as the pump took the data, and hear of the close).
        channel = host.channel
        for stream, buffer in (("stdout", channel.in_buffer), ("stderr", channel.in_stderr_buffer)):
            def feed(data, stream=stream) -> None:
                events.put(("data", (stream, bytes(data))))
                channel._check_add_window(len(data))
            buffer.feed = feed
    else:
        threading.Thread(target=reader, daemon=True).start()
    if pump_on == "thread":
        threading.Thread(target=pump, daemon=True).start()

    def run_cell(lines: bytes) -> frames.EndFrame | None:
        answer: Future = Future()
        events.put(("begin", (lines, answer)))
        while pump_on == "caller" and not answer.done():
            handle(events.get())
        return answer.result()

    ok = run_notebook(host, nb, run_cell)
    io.submit(lambda: host.channel.sendall(host.close_lines())).result()
    if reader_on == "paramiko":
        host.channel.shutdown_write()
        host.channel.status_event.wait(READ_WAIT_S)
        for client in host.clients:
            client.close()
    else:
        io.submit(host.disconnect).result()
    events.put(None)
    io.calls.put(None)
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("lean", "threads"), required=True)
    parser.add_argument("--pump", choices=("thread", "caller"), default="thread",
                        help="threads: the pump's work on a thread of its own, or done by the "
                             "caller while it waits for the cell")
    parser.add_argument("--sends", choices=("io", "pump"), default="io",
                        help="threads: a cell's lines sent by the I/O thread or by the pump")
    parser.add_argument("--reader", choices=("thread", "paramiko"), default="thread",
                        help="threads: the channel read by a reader thread, or its data put "
                             "on the pump's queue by paramiko's own thread")
    parser.add_argument("hosts", help="comma-separated names")
    parser.add_argument("ssh_config")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("outdir", type=Path)
    args = parser.parse_args()
    source = nbformat.read(args.notebook, as_version=4)
    def run_host(name: str, config: str, nb) -> bool:
        if args.shape == "lean":
            return lean(name, config, nb)
        return threads(name, config, nb, args.pump, args.sends, args.reader)
    args.outdir.mkdir(exist_ok=True)
    ok = []

    def one(name: str) -> None:
        nb = copy.deepcopy(source)
        if run_host(name, args.ssh_config, nb):
            (args.outdir / f"{name}.ipynb").write_text(notebook_json.writes(nb))
            ok.append(name)

    workers = [threading.Thread(target=one, args=(name,)) for name in args.hosts.split(",")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print("ok", len(ok))


if __name__ == "__main__":
    main()
