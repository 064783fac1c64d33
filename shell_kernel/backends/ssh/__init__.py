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
