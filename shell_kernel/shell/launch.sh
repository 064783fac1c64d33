# shell_kernel: start a durable session on this host. POSIX sh.
#
#   launch.sh IDLE_TIMEOUT REAP_SCRIPT BASH_ARG...
#
# The shell runs detached from the SSH session that started it (its own
# session via setsid, or re-parented to init), reading commands from a FIFO
# and appending its output to spool files in a private directory, so that it
# and its running cell outlive a dropped connection. A watchdog stops it all
# once no kernel has been attached (relay.sh running) for IDLE_TIMEOUT
# seconds. Prints "DIR PID", PID being the wrapper's, alive as long as the
# shell. Hosts without `setsid -f` (BusyBox, macOS) get the `&` fallback, in
# which the shell cannot receive SIGINT: interrupts then need the SIGTERM
# that follows the grace period.

timeout=$1 reap=$2
shift 2
user_umask=$(umask)
umask 077
dir=$(mktemp -d "${TMPDIR:-/tmp}/shell_kernel.XXXXXXXXXX") || exit 1
mkfifo "$dir/in" && : > "$dir/out" && : > "$dir/err" && printf '%s' "$reap" > "$dir/reap.sh" || {
  rm -rf "$dir"; exit 1; }

# The wrapper stays to record how the shell ended (relay.sh reports it), and
# writes its pid. `setsid -f` forks it off in a session of its own; a plain
# `&` would make SIGINT ignored for it, and so for the shell and every cell
# (ignored signals cannot be reset), hence only a fallback.
wrapper='echo $$ > "$1/wrapper.pid"; d=$1 u=$2; shift 2; umask "$u"
  "$@" 0<>"$d/in" >>"$d/out" 2>>"$d/err"
  echo $? > "$d/exit_status"'
if setsid -f true </dev/null >/dev/null 2>&1; then
  setsid -f sh -c "$wrapper" shell_kernel "$dir" "$user_umask" "$@" </dev/null >/dev/null 2>&1
else
  sh -c "$wrapper" shell_kernel "$dir" "$user_umask" "$@" </dev/null >/dev/null 2>&1 &
fi
# The wrapper lives exactly as long as the shell: its pid is the session's.
pid=
n=0
while [ -z "$pid" ] && [ $n -lt 500 ]; do
  [ -s "$dir/wrapper.pid" ] && pid=$(cat "$dir/wrapper.pid")
  [ -n "$pid" ] || sleep 0.01 2>/dev/null || sleep 1
  n=$((n + 1))
done
[ -n "$pid" ] || { echo "shell_kernel: the shell did not start" >&2; rm -rf "$dir"; exit 1; }

(
  trap '' HUP
  idle=0
  while sleep 5; do
    [ -d "$dir" ] || exit 0
    kill -0 "$pid" 2>/dev/null || { rm -rf "$dir"; exit 0; }
    if [ -r "$dir/relay.pid" ] && kill -0 "$(cat "$dir/relay.pid")" 2>/dev/null; then
      idle=0
    else
      idle=$((idle + 5))
    fi
    if [ "$idle" -ge "$timeout" ]; then
      shell=$(ps -A -o pid= -o ppid= | awk -v w="$pid" '$2 == w { print $1; exit }')
      sh "$dir/reap.sh" all - "${shell:-$pid}" "$dir" >/dev/null 2>&1
      kill -KILL "$pid" 2>/dev/null
      exit 0
    fi
  done
) </dev/null >/dev/null 2>&1 &
echo $! > "$dir/watchdog.pid"
echo "$dir $pid"
