"""Which connection failures backends.ssh.connect.connect tries again: a connection
dropped or reset before login (a busy host), never a refused login, host key
or peer (the end to end test is tests/test_fleet_saturated.py)."""

from __future__ import annotations

import socket

import paramiko
import pytest

from shell_kernel.backends.ssh.connect import _passing


@pytest.mark.parametrize("err", [
    paramiko.SSHException("Error reading SSH protocol banner[Errno 104] Connection reset by peer"),
    paramiko.SSHException("Error reading SSH protocol banner"),
    EOFError(), ConnectionResetError(104, "Connection reset by peer"), BrokenPipeError(),
])
def test_dropped_before_login_is_tried_again(err):
    assert _passing(err)


@pytest.mark.parametrize("err", [
    paramiko.AuthenticationException("Authentication failed."),
    paramiko.AuthenticationException("Authentication timeout."),
    paramiko.BadAuthenticationType("Bad authentication type", ["password"]),
    paramiko.SSHException('Indecipherable protocol version "HTTP/1.1 400"'),
    paramiko.IncompatiblePeer("Incompatible ssh peer (no acceptable kex algorithm)"),
    ConnectionRefusedError(111, "Connection refused"),
    socket.timeout("timed out"),  # the TCP connect: a host that is off
    OSError(113, "No route to host"),
])
def test_a_refusal_is_not_tried_again(err):
    assert not _passing(err)
