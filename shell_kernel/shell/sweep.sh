# shell_kernel: the sweep of dead state directories, part of launch.sh (POSIX
# sh functions, put into it by "#include"; private and own_sessions_dir are
# named.sh's). Its job: remove this user's session directories on this host
# that provably belong to no process any more.
#
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
  # The stamp is read before the directory is checked (which forks): in a
  # directory that is not the user's private one, where a stranger could
  # put it, it only puts off a sweep that own_sessions_dir would refuse.
  sessions_path
  now=$(date +%s 2>/dev/null) || return 0
  last=
  [ -f "$sessions/.swept" ] && read -r last 2>/dev/null < "$sessions/.swept"
  case $last in '' | *[!0-9]*) last=0 ;; esac
  [ $((now - last)) -ge 3600 ] || [ "$last" -gt "$now" ] || return 0
  own_sessions_dir || return 0
  echo "$now" > "$sessions/.swept"
  tmp=${TMPDIR:-/tmp}
  find "$tmp/." ! -name . -prune -name 'shell_kernel.*' -type d -user "$uid" -mtime +0 \
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

