# shell_kernel: attach a connection to a durable session. POSIX sh.
#
#   relay.sh DIR PID MARKER OUT_OFFSET ERR_OFFSET ENDED RESTART BASH HEARTBEAT HEARD GRACE
#            [OWNER TAKEN]
#
# Standard input goes to the shell's FIFO, line by line, but for the lines
# HEARTBEAT that the kernel sends every few seconds. Its spooled stdout and stderr come
# back from the given stream offsets (spool.sh follow), each after a header
# line "MARKER:START": what the login shell's startup files print on this
# connection comes before it, so it is never taken for the session's output.
# Ends when the connection closes (status 0), with status ENDED once the
# session's process PID has ended (after the last output), or with status
# RESTART when output it was to send has been dropped meanwhile (see
# spool.sh): a new relay then starts after the gap. A named session's relay
# ends at once with status TAKEN when DIR/owner is no longer OWNER: another
# kernel took the session over.
#
# A connection that closes within HEARD seconds of the kernel's last line was
# closed, not lost: a network that drops leaves the host without a word
# until sshd's timeouts close it, while a kernel that dies has its
# connection closed at once. Unless GRACE is 0 (a named session, which
# outlives its kernel), the session then ends once GRACE seconds have passed
# without the kernel coming back (a relay or a side shell of its own, see
# launch.sh alive). BASH (the session's) reads the input: it can tell the
# time without a fork.

#include pids.sh

dir=$1 pid=$2 marker=$3 ended=$6 restart=$7 bash=$8 heartbeat=$9 heard=${10} grace=${11}
[ -p "$dir/in" ] || { echo "shell_kernel: no session in $dir" >&2; exit 3; }
# When the session's wrapper PID started (wrapper.pid): once it has ended,
# its pid may name another process.
read -r _ started _ 2>/dev/null < "$dir/wrapper.pid"
if [ -n "${12-}" ]; then
  read -r owner 2>/dev/null < "$dir/owner"
  [ "$owner" = "${12}" ] || exit "${13}"
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
mine=
read -r mine 2>/dev/null < "$dir/relay.pid"
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
# The input, but for heartbeats; its status says whether it ended within
# HEARD seconds of the kernel's last line. (No startup file: BASH_ENV.)
forward='LC_ALL=C heard=$SECONDS line=
while IFS= read -r line; do
  heard=$SECONDS
  [ "$line" = "$1" ] || printf "%s\n" "$line"
done
[ -z "$line" ] || printf %s "$line"
[ $((SECONDS - heard)) -le "$2" ]'
exec 3<>"$dir/in" 4<&0
# (An asynchronous command's stdin would be /dev/null.)
BASH_ENV= "$bash" --norc --noprofile -c "$forward" shell_kernel "$heartbeat" "$heard" \
  <&4 >&3 2>/dev/null &
input=$(child $!)
wait "${input%% *}"
closed=$?
stop
[ "$closed" -eq 0 ] && [ "$grace" -gt 0 ] || exit 0

# Its kernel died, or its connection was cut under it (the kernel reattaches
# at once while a cell runs, else with its next cell). The session stays
# while another relay took over, or a kernel is reattaching (the holder
# changed), or it was stopped.
holder=
read -r holder 2>/dev/null < "$dir/holder"
n=0
while :; do
  [ -d "$dir" ] || exit 0
  now=
  read -r now 2>/dev/null < "$dir/relay.pid"
  [ "$now" = "$mine" ] || exit 0
  now=
  read -r now 2>/dev/null < "$dir/holder"
  [ "$now" = "$holder" ] || exit 0
  [ $n -lt "$grace" ] || break
  sleep 1
  n=$((n + 1))
done
read -r wrapper _ 2>/dev/null < "$dir/wrapper.pid" &&
  sh "$dir/reap.sh" all - "$wrapper" "$dir" >/dev/null 2>&1
