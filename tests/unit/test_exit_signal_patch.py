"""backends.ssh.connect.record_exit_signals patches paramiko internals: the transport's
channel handler table, and Channel._handle_request for the requests it does
not take itself. These tests fail when the installed paramiko is not what
the patch was written for, so that an upgrade is noticed, not silently wrong."""

from __future__ import annotations

import inspect
import types

import paramiko
import pytest

from shell_kernel.backends.ssh.connect import _channel_request, record_exit_signals

# The paramiko releases whose internals were read for the patch (pyproject
# allows >=3.4). A new major release: read Transport.run and
# Channel._handle_request again, then move the bound.
CHECKED_BELOW = (6,)


def _version() -> tuple[int, ...]:
    return tuple(int(part) for part in paramiko.__version__.split(".")[:2])


def test_the_installed_paramiko_is_one_the_patch_was_checked_against():
    assert (3, 4) <= _version() < CHECKED_BELOW, (
        f"paramiko {paramiko.__version__}: check _channel_request against its "
        "Transport.run and Channel._handle_request")


def test_paramiko_still_drops_exit_signal_and_dispatches_through_the_table():
    # If paramiko learnt exit-signal, the patch would be in the way of it.
    assert "exit-signal" not in inspect.getsource(paramiko.Channel._handle_request)
    # The patch replaces the table on the instance: run() must look it up there.
    assert "self._channel_handler_table[ptype](chan, m)" in inspect.getsource(paramiko.Transport.run)
    table = paramiko.Transport._channel_handler_table
    assert table[paramiko.common.MSG_CHANNEL_REQUEST] is paramiko.Channel._handle_request


def _request(*fields) -> paramiko.Message:
    message = paramiko.Message()
    for field in fields:
        if isinstance(field, bool):
            message.add_boolean(field)
        elif isinstance(field, int):
            message.add_int(field)
        else:
            message.add_string(field)
    message.rewind()
    return message


def _channel() -> paramiko.Channel:
    channel = paramiko.Channel(0)
    channel.transport = types.SimpleNamespace(server_object=None)  # what _handle_request reads
    return channel


@pytest.mark.parametrize("name, status", [("KILL", 137), ("TERM", 143), ("HUP", 129)])
def test_an_exit_signal_becomes_an_exit_status(name, status):
    channel = _channel()
    _channel_request(channel, _request("exit-signal", False, name, False, "", ""))
    assert channel.status_event.is_set()
    assert (channel.exit_status, channel.exit_signal) == (status, name)


def test_other_requests_go_to_paramiko_from_their_start():
    channel = _channel()
    _channel_request(channel, _request("exit-status", False, 3))
    assert channel.exit_status == 3 and channel.status_event.is_set()
    assert not hasattr(channel, "exit_signal")


def test_only_the_patched_transport_is_affected():
    patched = paramiko.Transport(types.SimpleNamespace(settimeout=lambda t: None))
    record_exit_signals(patched)
    assert patched._channel_handler_table[paramiko.common.MSG_CHANNEL_REQUEST] is _channel_request
    assert paramiko.Transport._channel_handler_table[paramiko.common.MSG_CHANNEL_REQUEST] \
        is paramiko.Channel._handle_request
