# shell_kernel: process records, "PID START", for the scripts that signal a
# process they did not just start. POSIX sh functions, put into each script
# that uses them where it says "#include pids.sh" (see __init__.py): they
# run on hosts that have none of these files.
#
# A pid alone may name another process by the time it is signalled (the one
# it named died; a host that rebooted, or the OOM killer, and pids are reused
# fast on a busy host). So a pid is recorded with when its process started,
# and signalled only while a process with that pid started then. Where the
# record is missing or incomplete, nothing is signalled.

# procfs: this host has a /proc to read processes from. SHELL_KERNEL_NO_PROC
# (set in the kernel's environment, which passes it to every script it runs
# on the host) makes every script behave as on a host without one (macOS,
# the BSDs): how the portable paths are tested on Linux.
procfs() {
  [ -z "${SHELL_KERNEL_NO_PROC-}" ] && [ -r /proc/self/stat ]
}

# pid_start PID: when process PID started, one word ("" once it is gone, or
# where that cannot be told). With /proc: field 22 of /proc/PID/stat (clock
# ticks after boot; the command name before it may hold anything, even ") "
# and newlines), digits only. Else ps: "PGID,Day,Mon,DD,HH:MM:SS,YYYY" (its
# process group and lstart, as session.bash writes it too): lstart alone is
# not enough, as procps computes it anew each time (it may move by a second
# between two calls) and tells seconds only (a pid reused within the same
# second); the group does not change across exec, and a stranger that took
# the pid would have to be in the same group too. ps prints lstart in local
# time: it runs in one fixed zone (TZ=UTC0, as reap.sh's and session.bash's
# ps do), so that a record made under one TZ (rc files that set it for the
# shell only, a daylight-saving change since) is told under any other.
# Which of the two a record holds shows in its form (see same_start).
pid_start() {
  read_start "$1"
  [ -z "$pid_now" ] || echo "$pid_now"
}

# read_start PID: sets $pid_now to what pid_start prints. Without a fork
# where /proc is read and the command name holds no newline (read takes one
# line): records and looks cost the host no process.
read_start() {
  pid_now=
  case $1 in '' | *[!0-9]*) return 0 ;; esac
  if procfs; then
    pid_stat=
    read -r pid_stat 2>/dev/null < "/proc/$1/stat" || [ -n "$pid_stat" ] || return 0
    case $pid_stat in *") "*) set -- "$1" ${pid_stat##*) } ;; *) set -- "$1" ;; esac
    if [ $# -lt 21 ]; then
      pid_stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
      set -- "$1" ${pid_stat##*) }
    fi
    [ $# -ge 21 ] && eval "pid_now=\${21}"
  else
    set -- $(TZ=UTC0 LC_ALL=C ps -o pgid= -o lstart= -p "$1" 2>/dev/null)
    [ $# -eq 6 ] && pid_now="$1,$2,$3,$4,$5,$6"
  fi
  return 0
}

# The awk function same_start(RECORDED, NOW): whether two start words name
# the same process: equal, or both ps words of one group whose lstart is at
# most a second apart. (Also used by reap.sh's awk program.)
pid_awk='
function start_seconds(f,   m, y, d, t) {
  m = (index("JanFebMarAprMayJunJulAugSepOctNovDec", f[3]) + 2) / 3
  y = f[6] - (m <= 2); d = f[4]
  split(f[5], t, ":")
  # Days since 1970-01-01 of that calendar date (the "days from civil" rule).
  d = 365 * y + int(y / 4) - int(y / 100) + int(y / 400) + int((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 719469
  return d * 86400 + t[1] * 3600 + t[2] * 60 + t[3]
}
function same_start(recorded, now,   a, b, n) {
  if (recorded == now) return 1
  if (split(recorded, a, ",") != 6 || split(now, b, ",") != 6 || a[1] != b[1]) return 0
  n = start_seconds(a) - start_seconds(b)
  return n >= -1 && n <= 1
}'

# start_kind WORD: proc, ps, or other (a record of an older form).
start_kind() {
  case $1 in
    *[!0-9]*) case $1 in *,*,*,*,*,*) echo ps ;; *) echo other ;; esac ;;
    *) echo proc ;;
  esac
}

# pid_record PID FILE: writes "PID START" into FILE, in one write (a reader
# at that moment finds no record, never half of one).
pid_record() {
  read_start "$1"
  echo "$1 $pid_now" > "$2"
}

# pid_is PID START: PID still names the process that started at START.
pid_is() {
  [ -n "$1" ] && [ -n "${2-}" ] || return 1
  read_start "$1"
  [ -n "$pid_now" ] || return 1
  [ "$pid_now" = "$2" ] && return 0
  [ "$(start_kind "$2")" = ps ] &&
    awk -v a="$2" -v b="$pid_now" "$pid_awk"'BEGIN { exit !same_start(a, b) }'
}

# pid_alive FILE: the process FILE records is alive; sets $recorded (its pid).
pid_alive() {
  recorded= recorded_start=
  read -r recorded recorded_start _ 2>/dev/null < "$1"
  pid_is "$recorded" "$recorded_start"
}

# pid_kill SIGNAL FILE: signals the process FILE records, if it is alive.
pid_kill() {
  pid_alive "$2" && kill -"$1" "$recorded" 2>/dev/null
}

# pid_gone FILE: FILE holds a whole record and its process is gone: no
# process has the pid, or one that started otherwise (told the same way as
# the record: a record without START, or none, proves nothing).
pid_gone() {
  recorded= recorded_start=
  read -r recorded recorded_start _ 2>/dev/null < "$1" || return 1
  [ -n "$recorded" ] && [ -n "$recorded_start" ] || return 1
  read_start "$recorded"
  [ -z "$pid_now" ] && return 0
  [ "$(start_kind "$pid_now")" = "$(start_kind "$recorded_start")" ] &&
    ! pid_is "$recorded" "$recorded_start"
}

# running PID: PID is a process that has not ended. A zombie has: where
# nothing reaps it (a container's init) it stays in the table for good.
# Without a fork where /proc is read and the command name holds no newline
# (as read_start): reap.sh asks it of every process it signalled.
running() {
  if procfs; then
    pid_stat= pid_file=/proc/$1/stat
    { read -r pid_stat < "$pid_file"; } 2>/dev/null || [ -n "$pid_stat" ] || return 1
    case $pid_stat in *") "*) set -- ${pid_stat##*) } ;; *) set -- ;; esac
    if [ $# -lt 20 ]; then
      pid_stat=$(cat "$pid_file" 2>/dev/null) || return 1
      set -- ${pid_stat##*) }
    fi
    [ "$1" != Z ]
  else
    case $(ps -o stat= -p "$1" 2>/dev/null) in '' | Z*) return 1 ;; esac
  fi
}

# session_over DIR PID START: the durable session in DIR has no shell any
# more: its wrapper (PID, which started at START) recorded how the shell
# ended, or is gone.
session_over() {
  [ -e "$1/exit_status" ] || ! pid_is "$2" "$3"
}
