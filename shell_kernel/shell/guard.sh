# shell_kernel: end a local session whose kernel died. POSIX sh, beside the shell.
#
#   guard.sh REAP_SCRIPT SHELL STATE_DIR ID
#
# Standard input is a pipe that only the kernel holds open, and never writes
# to: end-of-file means the kernel died without closing the session
# (SIGKILL, the OOM killer). The shell would then wait in its running cell
# forever (it sees its own end-of-file only between cells) and the state
# directory would stay; stop everything the session started, as a shutdown
# does. A kernel that closes the session ends this guard first.
#
# The guard also holds the shell's input open (the kernel passes it on), so
# that the shell does not end at the kernel's death before it is reaped:
# its children would be orphans by then, out of reach of reap.sh's tree.
# What left the shell's tree and session anyway (a double-forked daemon)
# carries __shell_kernel_session=ID in its environment: where the
# environment of a process can be read, those end too.

#include pids.sh

read -r line
sh -c "$1" shell_kernel all - "$2" "$3" >/dev/null 2>&1

# The pids of this user's processes whose environment holds the mark.
marked() {
  if procfs; then
    grep -lF -e "__shell_kernel_session=$4" /proc/[0-9]*/environ 2>/dev/null |
      sed 's,^/proc/,,; s,/environ$,,'
  else
    # ps's BSD "e" (procps, FreeBSD) prints the environment after the
    # arguments, each variable after a space (no argument of this script's
    # processes holds one so).
    ps axeww -o pid= -o command= 2>/dev/null |
      awk -v id="$4" 'index($0, " __shell_kernel_session=" id) { print $1 }'
  fi
}
pids=$(marked "$@")
[ -n "$pids" ] || exit 0
kill -TERM $pids 2>/dev/null
n=0
while [ -n "$pids" ] && [ $n -lt 10 ]; do
  sleep 0.05 2>/dev/null || sleep 1
  pids=$(marked "$@")
  n=$((n + 1))
done
# Looked for again each time: only what still carries the mark is killed.
for _ in 1 2 3; do
  [ -n "$pids" ] || exit 0
  kill -KILL $pids 2>/dev/null
  pids=$(marked "$@")
done
