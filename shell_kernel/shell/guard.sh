# shell_kernel: end a local session whose kernel died. POSIX sh, beside the shell.
#
#   guard.sh REAP_SCRIPT SHELL STATE_DIR
#
# Standard input is a pipe that only the kernel holds open, and never writes
# to: end-of-file means the kernel died without closing the session
# (SIGKILL, the OOM killer). The shell would then wait in its running cell
# forever (it sees its own end-of-file only between cells) and the state
# directory would stay; stop everything the session started, as a shutdown
# does. A kernel that closes the session ends this guard first.

read -r line
exec sh -c "$1" shell_kernel all - "$2" "$3" >/dev/null 2>&1
