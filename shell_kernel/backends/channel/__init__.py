"""The channel layer: shells over any transport that gives channels (a
command with stdin, stdout, stderr and an exit), and the durable layer over
them. SSH (ssh/) and local processes (local/: the local shell, and named
sessions) are two such transports.

channels.py: Channel, Channels, side commands and the side shell. shell.py:
a shell on one channel at a time; DirectShell. durable.py: a detached shell
reached through a relay channel, resumed after a drop. backend.py: the
Backend verbs over these.

Threads: start, reattach and close come from the session's caller thread;
one reader thread per shell channel (named by the transport) delivers output;
durable adds a heartbeat thread and a spool-acknowledgement timer.
"""
