# shell_kernel: start and look after durable sessions on this host. POSIX sh.
#
#   launch.sh start IDLE_TIMEOUT GENERATION KEEP STALL REAP_SCRIPT SPOOL_SCRIPT BASH_ARG...
#   launch.sh alive DIR PID    prints "alive" while the session is there
#   launch.sh status DIR       prints the shell's exit status, once it has ended
#   launch.sh stop DIR         stops what the session started, removes DIR
#
# start: the shell runs detached from the SSH session that started it (in a
# session of its own), reading commands from a FIFO; its stdout and stderr
# go through FIFOs to copiers that spool them into a private directory (see
# spool.sh, which GENERATION, KEEP and STALL are for), so that it and its running
# cell outlive a dropped connection. A watchdog stops it all once no kernel
# has been attached (relay.sh running) for IDLE_TIMEOUT seconds. The last
# line printed is "PID DIR", PID being the wrapper's, alive as long as the
# shell; DIR may hold any byte but NUL and newline.

mode=$1
shift

# The shell: the wrapper's child.
shell_of() {
  ps -A -o pid= -o ppid= | awk -v w="$1" '$2 == w { print $1; exit }'
}

# stop DIR: everything the session started, then DIR (reap.sh all). Once
# the wrapper has ended, so has the shell, and the kernel reaped the rest.
stop() {
  [ -d "$1" ] && [ ! -L "$1" ] || return 0
  if read -r wrapper 2>/dev/null < "$1/wrapper.pid" && kill -0 "$wrapper" 2>/dev/null; then
    shell=$(shell_of "$wrapper")
    sh "$1/reap.sh" all - "${shell:-$wrapper}" "$1" >/dev/null 2>&1
    kill -KILL "$wrapper" 2>/dev/null
  fi
  rm -rf -- "$1"
}

start() {
  timeout=$1 generation=$2 keep=$3 stall=$4 reap=$5 spool=$6
  shift 6
  user_umask=$(umask)
  umask 077
  dir=$(mktemp -d "${TMPDIR:-/tmp}/shell_kernel.XXXXXXXXXX") || exit 1
  { mkfifo "$dir/in" "$dir/out.fifo" "$dir/err.fifo" && : > "$dir/out.0" && : > "$dir/err.0" &&
    printf '%s' "$reap" > "$dir/reap.sh" && printf '%s' "$spool" > "$dir/spool.sh"; } ||
    { rm -rf "$dir"; exit 1; }

  # The wrapper stays to record how the shell ended (relay.sh reports it),
  # and writes its pid. The copiers are started from a subshell that ends at
  # once, so that the shell is the wrapper's only child.
  wrapper='echo $$ > "$1/wrapper.pid"; d=$1 u=$2 g=$3 k=$4 s=$5; shift 5
    ( sh "$d/spool.sh" copy "$d/out" "$g" "$k" "$s" < "$d/out.fifo" &
      sh "$d/spool.sh" copy "$d/err" "$g" "$k" "$s" < "$d/err.fifo" & )
    umask "$u"
    "$@" 0<>"$d/in" >"$d/out.fifo" 2>"$d/err.fifo"
    echo $? > "$d/exit_status"'
  # A session of its own for the wrapper, with SIGINT at its default (a plain
  # `&` would have the shell and every cell ignore it, for good): bash's job
  # control runs the job as a process group leader with default signals, and
  # there setsid forks into a new session, without needing `setsid -f`
  # (util-linux before 2.31, BusyBox). Without any setsid the wrapper stays in
  # this SSH session's session; reap.sh all allows for that. (--norc --posix:
  # no startup file is read, as none is wanted here.)
  "$1" --norc --posix -c 'set -m
    if command -v setsid >/dev/null 2>&1; then setsid "$@" & else "$@" & fi' shell_kernel \
    sh -c "$wrapper" shell_kernel "$dir" "$user_umask" "$generation" "$keep" "$stall" "$@" \
    </dev/null >/dev/null 2>&1
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
      # A kernel attaches its relay right after the launch: if none ever
      # did, its start failed (maybe with its connection, so that it could
      # not stop this session itself).
      [ "$idle" -ge "$timeout" ] || { [ ! -e "$dir/relay.pid" ] && [ "$idle" -ge 60 ]; } &&
        { stop "$dir"; exit 0; }
    done
  ) </dev/null >/dev/null 2>&1 &
  echo $! > "$dir/watchdog.pid"
  echo "$pid $dir"
}

case $mode in
  start) start "$@" ;;
  alive) [ -p "$1/in" ] && kill -0 "$2" 2>/dev/null && echo alive ;;
  status) cat "$1/exit_status" 2>/dev/null ;;
  stop) stop "$1" ;;
  *)
    echo "launch.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
