# shell_kernel: the launcher of durable sessions, part of launch.sh (POSIX
# sh functions, put into it by "#include"). Its job: start a session's shell
# detached, with its spool copiers, and a watchdog that ends the session once
# no kernel is attached, and tells the relay when the shell has ended; and
# stop a session with everything it started.
#
# start: the shell runs detached from the SSH session that started it (in a
# session of its own), reading commands from a FIFO; its stdout and stderr
# go through FIFOs to copiers that spool them into a private directory (see
# spool.sh, which GENERATION, KEEP and STALL are for), so that it and its running
# cell outlive a dropped connection. A watchdog stops it all once no kernel
# has been attached (relay.sh running, or a named session's holder alive) for
# IDLE_TIMEOUT seconds. The last line printed is "PID DIR", PID being the
# wrapper's, alive as long as the shell; DIR may hold any byte but NUL and newline.

# stop DIR: everything the session started, then DIR: reap.sh all from the
# wrapper (the shell's parent, leading its session), which signals it only
# while it is the process wrapper.pid records, and returns once all of it
# has ended (an attached relay is told the shell ended). Prints the pids of
# what would not end, if any.
stop() {
  [ -d "$1" ] && [ ! -L "$1" ] || return 0
  reaped=
  read -r wrapper _ 2>/dev/null < "$1/wrapper.pid" && [ -f "$1/reap.sh" ] &&
    reaped=$(sh "$1/reap.sh" all - "$wrapper" "$1" 2>/dev/null)
  rm -rf -- "$1"
  case $reaped in *left\ *) echo "${reaped##*left }" ;; esac
}

start() {
  user_umask=$(umask)
  umask 077
  dir=$(mktemp -d "${TMPDIR:-/tmp}/shell_kernel.XXXXXXXXXX") || exit 1
  launch "$@"
}

# launch IDLE_TIMEOUT GENERATION KEEP STALL REAP SPOOL BASH_ARG...: the
# session in $dir (made, empty, with umask 077; $user_umask the user's).
launch() {
  timeout=$1 generation=$2 keep=$3 stall=$4 reap=$5 spool=$6
  shift 6
  { mkfifo "$dir/in" "$dir/out.fifo" "$dir/err.fifo" "$dir/watch" "$dir/tick" "$dir/wrapper.fifo" &&
    : > "$dir/out.0" && : > "$dir/err.0" &&
    : > "$dir/tells_relay" &&
    printf '%s' "$reap" > "$dir/reap.sh" && printf '%s' "$spool" > "$dir/spool.sh"; } ||
    { rm -rf "$dir"; exit 1; }

  # The wrapper stays to record how the shell ended (relay.sh reports it),
  # then wakes the watchdog (which tells the relay), and says its pid on the
  # FIFO $dir/wrapper.fifo (recorded below, with its start; opened
  # read-write, so that it never blocks). The copiers are started from a
  # subshell that ends at once, so that the shell is the wrapper's only child.
  wrapper='echo $$ 1<>"$1/wrapper.fifo"; d=$1 u=$2 g=$3 k=$4 s=$5; shift 5
    ( sh "$d/spool.sh" copy "$d/out" "$g" "$k" "$s" < "$d/out.fifo" &
      sh "$d/spool.sh" copy "$d/err" "$g" "$k" "$s" < "$d/err.fifo" & )
    umask "$u"
    "$@" 0<>"$d/in" >"$d/out.fifo" 2>"$d/err.fifo"
    echo $? > "$d/exit_status"
    [ -p "$d/watch" ] && echo ended 1<>"$d/watch"'
  # A session of its own for the wrapper, with SIGINT at its default (a plain
  # `&` would have the shell and every cell ignore it, for good): bash's job
  # control runs the job as a process group leader with default signals, and
  # there setsid forks into a new session, without needing `setsid -f`
  # (util-linux before 2.31, BusyBox). Without any setsid the wrapper stays in
  # this SSH session's session; reap.sh all allows for that. (--norc --posix:
  # no startup file is read, as none is wanted here.) That bash then prints
  # the wrapper's pid, read from $dir/wrapper.fifo (its standard input) as
  # soon as the wrapper says it: `read -t` waits without a fork, at most 10 s.
  pid=$("$1" --norc --posix -c 'set -m
    if command -v setsid >/dev/null 2>&1; then
      setsid "$@" </dev/null >/dev/null 2>&1 &
    else
      "$@" </dev/null >/dev/null 2>&1 &
    fi
    read -t 10 -r pid && echo "$pid"' shell_kernel \
    sh -c "$wrapper" shell_kernel "$dir" "$user_umask" "$generation" "$keep" "$stall" "$@" \
    <>"$dir/wrapper.fifo" 2>/dev/null)
  # The wrapper lives exactly as long as the shell: its pid is the session's.
  case $pid in
    '' | *[!0-9]*) echo "shell_kernel: the shell did not start" >&2; rm -rf "$dir"; exit 1 ;;
  esac
  pid_record "$pid" "$dir/wrapper.pid"
  read -r _ started < "$dir/wrapper.pid"

  (
    trap '' HUP
    trap - EXIT
    # Every 5 s a tick on the FIFO $dir/watch, from a bash whose `read -t`
    # waits without a fork (`sleep 5` would fork each time, and so do the
    # looks below only where there is no /proc: see read_start): an idle
    # session costs its host nothing. It ends with the directory.
    "$1" --norc --posix -c 'exec 4<>"$1/tick"
      while [ -d "$1" ]; do read -t 5 -r _ <&4; echo tick; done' shell_kernel "$dir" \
      1<>"$dir/watch" 2>/dev/null &
    exec 3<>"$dir/watch"
    watchdog "$dir" "$pid" "$started" "$timeout"
  ) </dev/null >/dev/null 2>&1 &
  pid_record $! "$dir/watchdog.pid"
  echo "${launched-}$pid $dir"
}

# watchdog DIR PID START IDLE_TIMEOUT: reads its FIFO (fd 3):
# "tick" every 5 s, and "ended" from the wrapper once the shell ended. It
# tells the attached relay when the shell has ended (DIR/tells_relay says
# so to relay.sh).
#
# Whether a recorded process is still the one recorded (pid_is) costs no
# fork where /proc is read; elsewhere it runs ps. There every look but one
# a minute (and the look at an "ended") asks only whether some process has
# the pid (kill -0, a builtin): a process that ended is seen at once, one
# whose pid another process took by the next whole look. The whole look
# cannot go without ps there: nothing else tells when a process started,
# and the relay and the kernel's side shell, watched here, hold nothing
# whose end the watchdog could wait on instead.
watchdog() {
  idle=0 ended=0 told= looks=0
  while read -r why <&3; do
    [ -d "$1" ] || exit 0
    whole=
    if procfs || [ "$why" != tick ] || [ $((looks % 12)) -eq 0 ]; then whole=yes; fi
    looks=$((looks + 1))
    if seen_over "$1" "$2" "$3"; then
      whole=yes
      # The attached relay ends, with the status that says so: it waits on
      # its input alone, which costs the host nothing while the shell runs.
      if pid_alive "$1/relay.pid" && [ "$recorded $recorded_start" != "$told" ]; then
        told="$recorded $recorded_start"
        kill -USR1 "$recorded" 2>/dev/null
      fi
      # Its kernel asks how it ended (status) once its relay has seen the
      # end, and then stops the session itself: on a loaded host that can
      # come after this look, so the directory stays a minute. A named
      # session's stays until the idle timeout, so that the next kernel of
      # that name can say how it ended.
      [ "$why" = tick ] && ended=$((ended + 5))
      [ -e "$1/owner" ] || [ "$ended" -lt 60 ] || { rm -rf "$1"; exit 0; }
    fi
    [ "$why" = tick ] || continue
    if seen_alive "$1/relay.pid" || seen_alive "$1/holder"; then
      idle=0
    else
      idle=$((idle + 5))
    fi
    # A kernel attaches its relay right after the launch: if none ever
    # did, its start failed (maybe with its connection, so that it could
    # not stop this session itself).
    [ "$idle" -ge "$4" ] || { [ ! -e "$1/relay.pid" ] && [ "$idle" -ge 60 ]; } &&
      { stop "$1"; exit 0; }
  done
}

# seen_over DIR PID START: session_over, or where $whole is empty, the
# same with kill -0 for pid_is.
seen_over() {
  if [ -n "$whole" ]; then session_over "$@"; else [ -e "$1/exit_status" ] || ! kill -0 "$2" 2>/dev/null; fi
}

# seen_alive FILE: pid_alive, or where $whole is empty, whether a process
# has the pid FILE records.
seen_alive() {
  [ -z "$whole" ] || { pid_alive "$1"; return; }
  recorded=
  read -r recorded _ 2>/dev/null < "$1"
  case $recorded in '' | *[!0-9]*) return 1 ;; esac
  kill -0 "$recorded" 2>/dev/null
}

# alive DIR PID [OWNER]: prints "alive BEGUN POSTED" while the session in
# DIR, whose wrapper is PID, is there (and, named, still OWNER's: else
# "taken SINCE"). BEGUN and POSTED: the last cells whose first and post
# lines reached it (see relay.sh).
alive() {
  [ -p "$1/in" ] && pid_alive "$1/wrapper.pid" && [ "$recorded" = "$2" ] || exit 0
  dir=$1
  if [ -n "${3-}" ]; then
    [ "$(value "$dir/owner")" = "$3" ] || { echo "taken $(value "$dir/attached")"; exit 0; }
    date +%s > "$dir/attached" 2>/dev/null
  fi
  # The kernel's side shell, alive with its connection: a kernel is
  # attached (the watchdog), or coming back (a relay that saw it go).
  pid_record "$PPID" "$dir/holder"
  if read -r begun posted 2>/dev/null < "$dir/cells_heard"; then
    echo "alive $begun $posted"
  else
    echo alive  # (a session no relay of this version has served: not known)
  fi
}
