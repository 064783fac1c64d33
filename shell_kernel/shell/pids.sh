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

# pid_start PID: when process PID started, one word ("" once it is gone, or
# where that cannot be told): field 22 of /proc/PID/stat (clock ticks after
# boot; the command name before it may hold anything, even ") " and
# newlines), else ps's lstart without its spaces (as session.bash records it).
pid_start() {
  case $1 in '' | *[!0-9]*) return 0 ;; esac
  if [ -r /proc/self/stat ]; then
    pid_stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    set -- ${pid_stat##*) }
    [ $# -ge 20 ] && echo "${20}"
  else
    ps -o lstart= -p "$1" 2>/dev/null | tr -d ' '
  fi
}

# pid_record PID FILE: writes "PID START" into FILE, in one write (a reader
# at that moment finds no record, never half of one).
pid_record() {
  pid_line="$1 $(pid_start "$1")"
  echo "$pid_line" > "$2"
}

# pid_is PID START: PID still names the process that started at START.
pid_is() {
  [ -n "$1" ] && [ -n "${2-}" ] && [ "$(pid_start "$1")" = "$2" ]
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

# pid_gone FILE: FILE holds a whole record and its process is gone (a
# record without START, or none, proves nothing).
pid_gone() {
  recorded= recorded_start=
  read -r recorded recorded_start _ 2>/dev/null < "$1" || return 1
  [ -n "$recorded" ] && [ -n "$recorded_start" ] && ! pid_is "$recorded" "$recorded_start"
}
