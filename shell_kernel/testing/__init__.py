"""What the tests and the benchmarks share, as fabric.testing ships its
doubles: a real OpenSSH server on 127.0.0.1 (sshd.py, with host shapes in
hosts.py) and the process-table helpers it needs (processes.py); FakeShell, a
scripted Backend for the session engine (fake_shell.py); scripted channels
for the channel and durable layers (scripted_channels.py). Not used by the
kernel itself, and imports no test framework."""
