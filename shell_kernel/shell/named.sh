# shell_kernel: the registry of named sessions, part of launch.sh (POSIX sh
# functions, put into it by "#include"). Its job: find a named session by its
# name, check that the kernel may have it, start it when there is none (with
# launcher.sh's launch), list this user's named sessions and kill one; opens
# and kills of one name take turns under a lock.
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

# Whether the named session's shell ($dir/shell, second line) is gone, or a
# zombie its wrapper has not reaped yet: the wrapper alone outlives it briefly.
shell_ended() {
  { read -r _ && read -r s; } 2>/dev/null < "$dir/shell" || return 1
  ! running "$s" || { ! procfs && ! pid_alive "$dir/shell.start"; }
}

# Sets $uid, this user's id (asked once: id forks).
user_id() {
  [ -n "${uid-}" ] || uid=$(id -u)
}

# private DIR: a directory (not a symlink) of this user, writable by nobody else.
private() {
  [ -d "$1" ] && [ ! -L "$1" ] || return 1
  set -- $(ls -ldn -- "$1" 2>/dev/null)
  user_id
  [ "${3-}" = "$uid" ] || return 1
  case $1 in ?????w* | ????????w*) return 1 ;; esac
}

# Sets $sessions, this user's directory of named sessions.
sessions_path() {
  user_id
  sessions=${TMPDIR:-/tmp}/shell_kernel-$uid
}

# sessions_path, making the directory if need be; false unless it is private.
own_sessions_dir() {
  sessions_path
  [ -d "$sessions" ] || mkdir -m 700 "$sessions" 2>/dev/null
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

# kill_named NAME: prints killed once all of the session has ended, "left
# PID..." naming what would not end, or none.
kill_named() {
  name=$1
  valid_name "$name"
  sessions_dir
  lock
  if [ -d "$sessions/$1" ] && private "$sessions/$1"; then
    left=$(stop "$sessions/$1")
    if [ -z "$left" ]; then echo killed; else echo "left $left"; fi
  else
    echo none
  fi
}
