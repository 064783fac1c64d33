"""What the tests and the benchmarks share: a real OpenSSH server on
127.0.0.1 (sshd.py) and the process-table helpers it needs (processes.py).
Not used by the kernel itself."""
