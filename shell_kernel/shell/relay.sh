# shell_kernel: attach a connection to a durable session. POSIX sh.
#
#   relay.sh DIR PID OUT_OFFSET ERR_OFFSET
#
# Standard input goes to the shell's FIFO; its spooled stdout and stderr
# come back from the given byte offsets, so that a kernel reconnecting after
# a drop gets every byte exactly once. Ends when the connection closes
# (status 0), or with status 4 once the session's process PID has ended.

dir=$1 pid=$2
shift 2
[ -p "$dir/in" ] || { echo "shell_kernel: no session in $dir" >&2; exit 3; }
echo $$ > "$dir/relay.pid"
tail -c +$(($1 + 1)) -f "$dir/out" 2>/dev/null &
out=$!
# tail's own complaints (e.g. "file truncated") must not look like output.
tail -c +$(($2 + 1)) -f "$dir/err" 3>&2 2>/dev/null 1>&3 &
err=$!
relay=$$
(
  while kill -0 "$pid" 2>/dev/null; do sleep 1; done
  sleep 0.5 2>/dev/null || sleep 1  # let the tails pass on the last bytes
  kill "$out" "$err" 2>/dev/null
  kill -USR1 "$relay" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
watch=$!
trap 'kill "$out" "$err" "$watch" 2>/dev/null; exit 4' USR1
exec 3<>"$dir/in" 4<&0
cat <&4 >&3 &  # (an asynchronous command's stdin would be /dev/null)
wait $!
kill "$out" "$err" "$watch" 2>/dev/null
