# shell_kernel: attach a connection to a durable session. POSIX sh.
#
#   relay.sh DIR PID MARKER OUT_OFFSET ERR_OFFSET ENDED RESTART [OWNER TAKEN]
#
# Standard input goes to the shell's FIFO. Its spooled stdout and stderr come
# back from the given stream offsets (spool.sh follow), each after a header
# line "MARKER:START": what the login shell's startup files print on this
# connection comes before it, so it is never taken for the session's output.
# Ends when the connection closes (status 0), with status ENDED once the
# session's process PID has ended (after the last output), or with status
# RESTART when output it was to send has been dropped meanwhile (see
# spool.sh): a new relay then starts after the gap. A named session's relay
# ends at once with status TAKEN when DIR/owner is no longer OWNER: another
# kernel took the session over.

#include pids.sh

dir=$1 pid=$2 marker=$3 ended=$6 restart=$7
[ -p "$dir/in" ] || { echo "shell_kernel: no session in $dir" >&2; exit 3; }
# When the session's wrapper PID started (wrapper.pid): once it has ended,
# its pid may name another process.
read -r _ started _ 2>/dev/null < "$dir/wrapper.pid"
if [ -n "${8-}" ]; then
  read -r owner 2>/dev/null < "$dir/owner"
  [ "$owner" = "$8" ] || exit "$9"
fi
relay=$$
relay_start=$(pid_start "$relay")
# This relay's children, each "PID START": one that has ended may have been
# reaped (`wait` reaps them all), and its pid handed to another process.
out= err= watch= input=
child() {
  echo "$1 $(pid_start "$1")"
}
stop() {
  for running in "$out" "$err" "$watch" "$input"; do
    pid_is $running && kill "${running%% *}" 2>/dev/null
  done
}
# The shell ended: the watcher below says so and exits at once.
trap 'watch=; stop; exit "$ended"' USR1
# A follower could not go on. Input keeps flowing until the kernel closes
# this channel, so nothing it sends meanwhile is lost.
trap 'input=; stop; exit "$restart"' USR2
pid_record "$relay" "$dir/relay.pid"  # for the watchdog: a kernel is attached
# The followers' own complaints must not look like output.
sh "$dir/spool.sh" follow "$dir/out" "$4" "$marker" "$relay" 2>/dev/null &
out=$(child $!)
sh "$dir/spool.sh" follow "$dir/err" "$5" "$marker" "$relay" 3>&2 2>/dev/null 1>&3 &
err=$(child $!)
(
  while pid_is "$pid" "$started"; do sleep 1; done
  sleep 0.5 2>/dev/null || sleep 1  # let the followers pass on the last bytes
  pid_is "$relay" "$relay_start" && kill -USR1 "$relay" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
watch=$(child $!)
exec 3<>"$dir/in" 4<&0
cat <&4 >&3 2>/dev/null &  # (an asynchronous command's stdin would be /dev/null)
input=$(child $!)
wait "${input%% *}"
stop
