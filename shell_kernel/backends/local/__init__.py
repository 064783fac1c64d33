"""The local backends, both over the channel layer: bash as a child of the
kernel, read through its pipes (backend.LocalBackend, processes.ShellChannel),
or, for a named session, detached and reached over local channels
(backend.LocalNamedBackend, processes.LocalChannels).

spawn.py starts the local shell on the launch thread before ipykernel is
imported: neither it nor this package imports the channel layer or
paramiko.

Threads: start and close on the session's caller (or launch) thread;
`shell-kernel-local-reader` reads the shell's pipes; `shell-kernel-terminal`
reads the prompt terminal (terminal.py).
"""
