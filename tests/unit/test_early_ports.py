"""early_ports: listening on a connection file's ports before ipykernel binds them."""

from __future__ import annotations

import json
import socket

import pytest

from shell_kernel.early_ports import EarlyPorts, connection_file, endpoint


@pytest.mark.parametrize("argv, path", [
    (["-f", "/run/k.json"], "/run/k.json"), (["--f=/run/k.json"], "/run/k.json"),
    (["-f=/run/k.json", "--debug"], "/run/k.json"), (["--debug"], None), (["-f"], None)])
def test_the_connection_file_is_found_in_the_kernels_arguments(argv, path):
    assert connection_file(argv) == path


def test_endpoints_are_those_ipykernel_binds():
    assert endpoint("tcp", "127.0.0.1", 5555) == "tcp://127.0.0.1:5555"
    assert endpoint("ipc", "/run/kernel", 3) == "ipc:///run/kernel-3"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_each_channel_is_listened_on_until_taken_or_closed(tmp_path):
    ports = {key: _free_port() for key in ("shell_port", "iopub_port", "stdin_port",
                                            "control_port", "hb_port")}
    info = tmp_path / "kernel.json"
    info.write_text(json.dumps({"transport": "tcp", "ip": "127.0.0.1", **ports}))
    early = EarlyPorts.open(["-f", str(info)])
    for key, port in ports.items():
        with socket.socket() as client:
            refused = client.connect_ex(("127.0.0.1", port))
        assert bool(refused) == (key == "hb_port"), key
    taken = early.take(endpoint("tcp", "127.0.0.1", ports["shell_port"]))
    assert isinstance(taken, int)
    assert early.take(endpoint("tcp", "127.0.0.1", ports["shell_port"])) is None
    early.close()
    with socket.socket() as client:
        assert client.connect_ex(("127.0.0.1", ports["iopub_port"])) != 0
    socket.socket(fileno=taken).close()


def test_a_missing_connection_file_or_a_taken_port_is_left_to_ipykernel(tmp_path):
    assert EarlyPorts.open(["-f", str(tmp_path / "none.json")]).take("tcp://127.0.0.1:1") is None
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        info = tmp_path / "kernel.json"
        info.write_text(json.dumps({"transport": "tcp", "ip": "127.0.0.1", "shell_port": port}))
        assert EarlyPorts.open(["-f", str(info)]).take(endpoint("tcp", "127.0.0.1", port)) is None
