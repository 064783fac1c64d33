# shell_kernel: start and look after durable sessions on this host. POSIX sh.
#
#   launch.sh start IDLE_TIMEOUT GENERATION KEEP STALL REAP_SCRIPT SPOOL_SCRIPT BASH_ARG...
#   launch.sh open NAME OWNER TAKE_OVER IDLE_TIMEOUT GENERATION ... BASH_ARG...
#                              the named session NAME: attach to it, or start it
#   launch.sh alive DIR PID [OWNER]  prints "alive" while the session is there
#                              (and, named, still OWNER's: else "taken SINCE")
#   launch.sh status DIR       prints the shell's exit status, once it has ended
#   launch.sh stop DIR         stops what the session started, removes DIR
#   launch.sh list             one line per named session of this user
#   launch.sh kill NAME        stops the named session NAME: prints killed once
#                              all of it has ended, else "left PID..."
#   launch.sh sweep            removes this user's state directories that
#                              provably belong to no process any more (in
#                              the background; start and open do it too)
#
# start: the shell runs detached from the SSH session that started it (in a
# session of its own), reading commands from a FIFO; its stdout and stderr
# go through FIFOs to copiers that spool them into a private directory (see
# spool.sh, which GENERATION, KEEP and STALL are for), so that it and its running
# cell outlive a dropped connection. A watchdog stops it all once no kernel
# has been attached (relay.sh running, or a named session's holder alive) for
# IDLE_TIMEOUT seconds. The last line printed is "PID DIR", PID being the
# wrapper's, alive as long as the shell; DIR may hold any byte but NUL and newline.
#
# open: a named session lives in SESSIONS/NAME, SESSIONS being
# ${TMPDIR:-/tmp}/shell_kernel-UID (0700): per host (a home directory may be
# shared by many hosts), and not under XDG_RUNTIME_DIR, which logind removes
# when the user's last login ends -- just when a named session must stay.
# Both directories must be the user's own and writable by nobody else. OWNER
# is the kernel's random token; the process that runs this script (the
# kernel's side shell, alive as long as its connection) is the holder: while
# it or the relay lives, another kernel is refused ("held SINCE"), unless
# TAKE_OVER is "yes" (then the old relay ends, and the old kernel finds the
# session taken when it reattaches). Opens (and kills) of one name take
# turns (see lock). The last line printed is one of
#   new PREVIOUS PID DIR       started (PREVIOUS: "-", or how an ended one had ended)
#   attached PID SHELL TOKEN BASH_VERSION OUT_DELIVERED ERR_DELIVERED OUT_END ERR_END
#            STARTED_SEQ STARTED_AT DONE_SEQ DONE_STATUS DIR
#   held SINCE | refused WHY...
# (the values a kernel needs to take the shell over: session.bash wrote the
# shell's, the last kernel's acknowledgements the delivered offsets).

mode=$1
shift

#include pids.sh

# stop DIR: everything the session started, then DIR: reap.sh all from the
# wrapper (the shell's parent, leading its session), which signals it only
# while it is the process wrapper.pid records, and returns once all of it
# has ended. Prints the pids of what would not end, if any.
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
  { mkfifo "$dir/in" "$dir/out.fifo" "$dir/err.fifo" "$dir/watch" "$dir/tick" && : > "$dir/out.0" && : > "$dir/err.0" &&
    printf '%s' "$reap" > "$dir/reap.sh" && printf '%s' "$spool" > "$dir/spool.sh"; } ||
    { rm -rf "$dir"; exit 1; }

  # The wrapper stays to record how the shell ended (relay.sh reports it),
  # and writes its pid (recorded below, with its start). The copiers are
  # started from a subshell that ends at once, so that the shell is the
  # wrapper's only child.
  wrapper='echo $$ > "$1/wrapper.new"; d=$1 u=$2 g=$3 k=$4 s=$5; shift 5
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
    [ -s "$dir/wrapper.new" ] && read -r pid < "$dir/wrapper.new"
    [ -n "$pid" ] || sleep 0.01 2>/dev/null || sleep 1
    n=$((n + 1))
  done
  [ -n "$pid" ] || { echo "shell_kernel: the shell did not start" >&2; rm -rf "$dir"; exit 1; }
  pid_record "$pid" "$dir/wrapper.pid" && rm -f "$dir/wrapper.new"
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
    idle=0 ended=0
    while read -r _ <&3; do
      [ -d "$dir" ] || exit 0
      # The shell ended. Its kernel asks how (status) once its relay has seen
      # the end, and then stops the session itself: on a loaded host that
      # can come after this look, so the directory stays a minute. A named
      # session's stays until the idle timeout, so that the next kernel of
      # that name can say how it ended.
      if ! pid_is "$pid" "$started"; then
        ended=$((ended + 5))
        [ -e "$dir/owner" ] || [ "$ended" -lt 60 ] || { rm -rf "$dir"; exit 0; }
      fi
      if pid_alive "$dir/relay.pid" || pid_alive "$dir/holder"; then
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
  pid_record $! "$dir/watchdog.pid"
  echo "${launched-}$pid $dir"
}

# Whether the named session's shell ($dir/shell, second line) is gone, or a
# zombie its wrapper has not reaped yet: the wrapper alone outlives it briefly.
shell_ended() {
  { read -r _ && read -r s; } 2>/dev/null < "$dir/shell" || return 1
  ! running "$s" || { ! procfs && ! pid_alive "$dir/shell.start"; }
}

# private DIR: a directory (not a symlink) of this user, writable by nobody else.
private() {
  [ -d "$1" ] && [ ! -L "$1" ] || return 1
  set -- $(ls -ldn -- "$1" 2>/dev/null)
  [ "${3-}" = "$(id -u)" ] || return 1
  case $1 in ?????w* | ????????w*) return 1 ;; esac
}

# Sets $sessions, this user's directory of named sessions, making it if need
# be; false unless it is private.
own_sessions_dir() {
  sessions=${TMPDIR:-/tmp}/shell_kernel-$(id -u)
  mkdir -m 700 "$sessions" 2>/dev/null
  private "$sessions"
}

# own_sessions_dir, or the refusal.
sessions_dir() {
  own_sessions_dir && return 0
  echo "refused $sessions is not a private directory of this user (owned by another user," \
    "a symlink, or writable by others), so no named session can be trusted there; nothing" \
    "was run. Remove it, or set TMPDIR on the host to a directory of your own."
  exit 3
}

valid_name() {
  case $1 in
    '' | .* | -* | *[!A-Za-z0-9._-]*)
      echo "refused '$1' cannot name a session (letters, digits, '.', '_' and '-' only," \
        "not starting with '.' or '-')"
      exit 3 ;;
  esac
}

# value FILE [DEFAULT]: the first word of FILE's first line; second: the second.
value() {
  v=
  read -r v _ 2>/dev/null < "$1"
  echo "${v:-${2--}}"
}
second() {
  v=
  read -r _ v _ 2>/dev/null < "$1"
  echo "${v:--}"
}

# lock: holds, until this script ends, the lock that serialises opening and
# killing the named session $name on this host ($sessions/.NAME.lock, which
# no session name can clash with): else a second kernel would find the
# session half made, take it for ended and remove it. A lock is stale once
# its maker is provably gone (its record names a process that no longer
# runs) or it is older than a minute, more than any open or kill takes (a
# kernel gives up on an open after 25 s): a maker killed between making it
# and writing its record left none. One waiter at a time removes a stale
# lock, under $lock.break, which is taken over the same way when a waiter
# was killed while it held that.
lock() {
  lock=$sessions/.$name.lock
  n=0
  until mkdir "$lock" 2>/dev/null; do
    if stale "$lock"; then
      if mkdir "$lock.break" 2>/dev/null; then
        pid_record $$ "$lock.break/pid"
        stale "$lock" && rm -rf "$lock"
        rm -rf "$lock.break"
        continue
      fi
      if stale "$lock.break"; then rm -rf "$lock.break"; continue; fi
    fi
    n=$((n + 1))
    [ $n -lt 200 ] || {
      echo "refused another kernel has been opening or stopping the session $name on this" \
        "host for 20 s, so nothing was run. Try again (a lock left by a kernel that was" \
        "killed is taken over once that kernel is gone, or after a minute)."
      exit 3
    }
    sleep 0.1 2>/dev/null || sleep 1
  done
  trap 'rm -rf "$lock"' EXIT
  pid_record $$ "$lock/pid"
}

# stale LOCK: LOCK's maker is provably gone, or LOCK is older than a minute
# (find's -mmin is not POSIX, but GNU, BusyBox and the BSDs have it).
stale() {
  pid_gone "$1/pid" || [ -n "$(find "$1" -prune -mmin +1 2>/dev/null)" ]
}

open_named() {
  name=$1 owner=$2 take_over=$3
  shift 3
  valid_name "$name"
  sessions_dir
  lock
  dir=$sessions/$name
  user_umask=$(umask)
  umask 077
  previous=-
  tries=0
  while :; do
    if [ -e "$dir" ] || [ -L "$dir" ]; then
      private "$dir" || {
        echo "refused $dir is not a private directory of this user, so it was not" \
          "trusted; nothing was run. Remove it, or use another session name."
        exit 3
      }
      # (Under the lock, a session is never half made: one without a
      # wrapper is one whose start failed.)
      if [ -p "$dir/in" ] && pid_alive "$dir/wrapper.pid" && ! shell_ended; then
        attach
        return
      fi
      # A shell killed a moment ago: its wrapper is about to record how it ended.
      n=0
      while pid_alive "$dir/wrapper.pid" && [ $n -lt 50 ]; do
        sleep 0.1 2>/dev/null || sleep 1
        n=$((n + 1))
      done
      previous=$(value "$dir/exit_status" "?")
      # Its watchdog would remove the directory once it sees the shell gone,
      # even after the new session of this name has made it again.
      pid_kill TERM "$dir/watchdog.pid"
      stop "$dir" >/dev/null  # it ended (its shell exited, or the host rebooted)
    fi
    if mkdir "$dir" 2>/dev/null; then
      echo "$owner" > "$dir/owner"
      pid_record "$PPID" "$dir/holder"
      date +%s > "$dir/created" 2>/dev/null
      date +%s > "$dir/attached" 2>/dev/null
      launched="new $previous "
      launch "$@"
      return
    fi
    tries=$((tries + 1))
    [ $tries -lt 3 ] || { echo "refused could not make $dir"; exit 3; }
  done
}

# held: another kernel is attached to $dir (its relay or its connection is
# alive). One that was just killed lets go within a moment: wait for that.
held() {
  n=0
  while pid_alive "$dir/relay.pid" || pid_alive "$dir/holder"; do
    [ $n -lt 20 ] || return 0
    sleep 0.1 2>/dev/null || sleep 1
    n=$((n + 1))
  done
  return 1
}

attach() {
  previous_owner=$(value "$dir/owner")
  if [ "$previous_owner" != "$owner" ] && [ "$take_over" != yes ] && held; then
    echo "held $(value "$dir/attached")"
    exit 3
  fi
  echo "$owner" > "$dir/owner.new" && mv -f "$dir/owner.new" "$dir/owner"
  # Taken over: the old kernel's relay ends, and its next one finds the session taken.
  [ "$previous_owner" != "$owner" ] && pid_kill USR2 "$dir/relay.pid"
  pid_record "$PPID" "$dir/holder"
  date +%s > "$dir/attached" 2>/dev/null
  { read -r token && read -r shell && read -r version; } 2>/dev/null < "$dir/shell"
  { read -r done_seq && read -r done_status; } 2>/dev/null < "$dir/status"
  read -r out_delivered err_delivered 2>/dev/null < "$dir/delivered"
  read -r started_seq started_at 2>/dev/null < "$dir/started"
  echo "attached $(value "$dir/wrapper.pid") ${shell:--} ${token:--} ${version:--}" \
    "${out_delivered:-0} ${err_delivered:-0}" \
    "$(sh "$dir/spool.sh" end "$dir/out") $(sh "$dir/spool.sh" end "$dir/err")" \
    "${started_seq:-0} ${started_at:--} ${done_seq:-0} ${done_status:--} $dir"
}

# One line per named session: NAME STATE CREATED ATTACHED STARTED_SEQ
# STARTED_AT DONE_SEQ SPOOL_BYTES, STATE being held, detached, starting (a
# kernel opens it: no wrapper yet) or ended.
list() {
  sessions_dir
  for dir in "$sessions"/*; do
    [ -d "$dir" ] && private "$dir" || continue
    if [ -p "$dir/in" ] && pid_alive "$dir/wrapper.pid"; then
      state=detached
      { pid_alive "$dir/relay.pid" || pid_alive "$dir/holder"; } && state=held
    elif [ ! -s "$dir/wrapper.pid" ] && [ -d "$sessions/.${dir##*/}.lock" ]; then
      state=starting
    else
      state=ended
    fi
    spooled=$(ls -ln "$dir" 2>/dev/null |
      awk '$NF ~ /^(out|err)\.[0-9]+$/ { n += $5 } END { print n + 0 }')
    echo "${dir##*/} $state $(value "$dir/created") $(value "$dir/attached")" \
      "$(value "$dir/started" 0) $(second "$dir/started")" \
      "$(value "$dir/status" 0) $spooled"
  done
}

# sweep: a session's state directory (${TMPDIR:-/tmp}/shell_kernel.*) stays
# when its host went down for longer than its kernel kept trying to clean up
# (or the kernel died with it). Removed here once every process it records
# is provably gone (recorded pid and start no longer match) and nothing in it
# changed for a day: a kernel whose connection-bound shell was lost with its
# connection restores cwd and exports from it when it reconnects, which may
# be long after. One that records no process, or a pid without its start, or
# is not this user's private directory, is left alone.
# It costs the host little whatever else is there: at most once an hour per
# host and user (the stamp $sessions/.swept), only this user's directories
# unchanged for a day (one find: other users' sessions cost nothing), at most
# SWEEP_MAX of them a turn; and it runs in the background, so that nothing
# waits for it.
SWEEP_MAX=100
sweep() {
  own_sessions_dir || return 0
  now=$(date +%s 2>/dev/null) || return 0
  last=
  read -r last 2>/dev/null < "$sessions/.swept"
  case $last in '' | *[!0-9]*) last=0 ;; esac
  [ $((now - last)) -ge 3600 ] || [ "$last" -gt "$now" ] || return 0
  echo "$now" > "$sessions/.swept"
  tmp=${TMPDIR:-/tmp}
  find "$tmp/." ! -name . -prune -name 'shell_kernel.*' -type d -user "$(id -u)" -mtime +0 \
    2>/dev/null | {
    n=0
    while [ $n -lt $SWEEP_MAX ] && IFS= read -r dir; do
      n=$((n + 1))
      dir=$tmp/${dir##*/}
      private "$dir" || continue
      [ -z "$(find "$dir" -mtime -1 2>/dev/null | head -n 1)" ] || continue
      gone=
      for record in shell.start wrapper.pid watchdog.pid; do
        [ -e "$dir/$record" ] || continue
        pid_gone "$dir/$record" || continue 2
        gone=yes
      done
      [ -z "$gone" ] || rm -rf -- "$dir"
    done
  }
}
sweep_in_background() {
  (sweep) </dev/null >/dev/null 2>&1 &
}

case $mode in
  start) start "$@"; sweep_in_background ;;
  open) open_named "$@"; sweep_in_background ;;
  alive)
    [ -p "$1/in" ] && pid_alive "$1/wrapper.pid" && [ "$recorded" = "$2" ] || exit 0
    dir=$1
    if [ -n "${3-}" ]; then
      [ "$(value "$dir/owner")" = "$3" ] || { echo "taken $(value "$dir/attached")"; exit 0; }
      date +%s > "$dir/attached" 2>/dev/null
    fi
    # The kernel's side shell, alive with its connection: a kernel is
    # attached (the watchdog), or coming back (a relay that saw it go).
    pid_record "$PPID" "$dir/holder"
    echo alive ;;
  list) list ;;
  kill)
    name=$1
    valid_name "$name"
    sessions_dir
    lock
    if [ -d "$sessions/$1" ] && private "$sessions/$1"; then
      left=$(stop "$sessions/$1")
      if [ -z "$left" ]; then echo killed; else echo "left $left"; fi
    else
      echo none
    fi ;;
  status) cat "$1/exit_status" 2>/dev/null ;;
  stop) stop "$1" ;;
  sweep) sweep_in_background ;;
  *)
    echo "launch.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
