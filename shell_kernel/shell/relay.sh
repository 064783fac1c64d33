# shell_kernel: attach a connection to a durable session. POSIX sh.
#
#   relay.sh DIR PID MARKER OUT_OFFSET ERR_OFFSET ENDED RESTART BASH HEARTBEAT ACK HEARD
#            GRACE [OWNER TAKEN]
#
# Standard input goes to the shell's FIFO, line by line, but for the
# kernel's own lines: HEARTBEAT, which it sends every few seconds, and "ACK
# OUT ERR", its acknowledgement of the output it received, up to those
# stream offsets (see acknowledged below). Its spooled stdout and stderr come
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

dir=$1 pid=$2 marker=$3 ended=$6 restart=$7 bash=$8 heartbeat=$9 ack=${10} heard=${11}
grace=${12} owner=${13-}
[ -p "$dir/in" ] || { echo "shell_kernel: no session in $dir" >&2; exit 3; }
# When the session's wrapper PID started (wrapper.pid): once it has ended,
# its pid may name another process.
read -r _ started _ 2>/dev/null < "$dir/wrapper.pid"
if [ -n "$owner" ]; then
  now=
  read -r now 2>/dev/null < "$dir/owner"
  [ "$now" = "$owner" ] || exit "${14}"
fi
relay=$$
# This relay's children, each "PID START": one that has ended may have been
# reaped (`wait` reaps them all), and its pid handed to another process.
# child PID sets $child to PID's record.
out= err= input= watch=
child() {
  read_start "$1"
  child="$1 $pid_now"
}
stop() {
  for running in "$out" "$err" "$input" "$watch"; do
    pid_is $running && kill "${running%% *}" 2>/dev/null
  done
}
# The shell ended: the session's watchdog (launch.sh) says so, or reap.sh
# as it stops the session. Nothing here looks for it meanwhile: an attached
# idle session costs its host nothing. The followers first pass on the last
# bytes.
trap 'sleep 0.5 2>/dev/null || sleep 1; watch=; stop; exit "$ended"' USR1
# A follower could not go on. Input keeps flowing until the kernel closes
# this channel, so nothing it sends meanwhile is lost.
trap 'input=; stop; exit "$restart"' USR2
pid_record "$relay" "$dir/relay.pid"  # for the watchdog: a kernel is attached
mine=
read -r mine 2>/dev/null < "$dir/relay.pid"
# The followers' own complaints must not look like output.
sh "$dir/spool.sh" follow "$dir/out" "$4" "$marker" "$relay" 2>/dev/null &
child $!
out=$child
sh "$dir/spool.sh" follow "$dir/err" "$5" "$marker" "$relay" 3>&2 2>/dev/null 1>&3 &
child $!
err=$child
# A shell that ended before this relay was recorded: the watchdog may have
# looked for a relay to tell before.
if session_over "$dir" "$pid" "$started"; then
  sleep 0.5 2>/dev/null || sleep 1  # let the followers pass on the last bytes
  stop
  exit "$ended"
fi
# A session whose watchdog does not tell (launched by an older
# shell_kernel, which has no DIR/tells_relay) is looked at every second.
if [ ! -e "$dir/tells_relay" ]; then
  read_start "$relay"
  relay_start=$pid_now
  (
    while pid_is "$pid" "$started"; do sleep 1; done
    pid_is "$relay" "$relay_start" && kill -USR1 "$relay" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  child $!
  watch=$child
fi
# The input, but for the kernel's own lines; its status says whether it
# ended within HEARD seconds of the kernel's last line. (No startup file:
# BASH_ENV.) An acknowledgement costs the host no process: it is read here,
# by the bash that reads the input, with its builtins (rm only once a whole
# spool file was received). It writes when the kernel last acknowledged
# (DIR/acked: a kernel reading, see spool.sh; the time is the bash's start,
# from printf, or date before bash 4.2, plus SECONDS), has the spool files
# it received removed and, a named session's, records the offsets
# (DIR/delivered: where the next kernel resumes) while it is still OWNER's.
# Both are rewritten in place, in one write of a fixed length: a reader
# never finds one empty.
forward='LC_ALL=C heard=$SECONDS line= dir=$3 owner=$4 since=
printf -v since "%(%s)T" -1 2>/dev/null
case $since in "" | *[!0-9]*) since=$(date +%s 2>/dev/null) ;; esac
case $since in *[!0-9]*) since= ;; esac
# drop PREFIX OFFSET: removes the generations of a stream that end before
# OFFSET (where the next one starts), never the newest (as in spool.sh).
drop() {
  below=-1 old=()
  for f in "$1".[0-9]*; do
    n=${f#"$1".}
    case $n in *[!0-9]*) continue ;; esac
    [ "$n" -lt "$2" ] && [ "$n" -gt "$below" ] && below=$n
  done
  for f in "$1".[0-9]*; do
    n=${f#"$1".}
    case $n in *[!0-9]*) continue ;; esac
    [ "$n" -lt "$below" ] && old+=("$f")
  done
  [ ${#old[@]} -eq 0 ] || rm -f -- "${old[@]}"
}
# The numbers of the last cells whose first line and whose post line came
# (DIR/cells_heard, rewritten in place like DIR/acked): a kernel that
# reconnects under a cell learns whether its lines reached the host
# (launch.sh alive), or went down with the connection and must go again.
# Each is written before the line goes on (never behind the shell), and as
# this relay starts (once there, it is known to be kept).
heard_cell() {
  seq=${1%%[!0-9]*}
  [ -n "$seq" ] || return 0
  if [ "$2" = post ]; then posted=$seq; else begun=$seq; fi
  printf "%20s %20s\n" "$begun" "$posted" 1<>"$dir/cells_heard"
}
begun=0 posted=0
read -r begun posted < "$dir/cells_heard"
heard_cell "${posted:-0}" post
acknowledged() {
  case $1/$2 in */ | /* | *[!0-9/]*) return 0 ;; esac
  if [ -n "$owner" ]; then
    now=
    read -r now < "$dir/owner" && [ "$now" = "$owner" ] || return 0
    printf "%20s %20s\n" "$1" "$2" 1<>"$dir/delivered"
  fi
  [ -z "$since" ] || printf "%s\n" $((since + SECONDS)) 1<>"$dir/acked"
  drop "$dir/out" "$1"
  drop "$dir/err" "$2"
}
while IFS= read -r line; do
  heard=$SECONDS
  case $line in
    "$1") ;;
    "$2 "*) acknowledged ${line#"$2 "} ;;
    "__shell_kernel_resume "*)
      heard_cell "${line#"__shell_kernel_resume "}" first
      printf "%s\n" "$line" ;;
    "__shell_kernel_rc="*)
      heard_cell "${line#*"; builtin set +T; __shell_kernel_post "}" post
      printf "%s\n" "$line" ;;
    *) printf "%s\n" "$line" ;;
  esac
done
[ -z "$line" ] || printf %s "$line"
[ $((SECONDS - heard)) -le "$5" ]'
exec 3<>"$dir/in" 4<&0
# (An asynchronous command's stdin would be /dev/null.)
BASH_ENV= "$bash" --norc --noprofile -c "$forward" shell_kernel "$heartbeat" "$ack" "$dir" \
  "$owner" "$heard" <&4 >&3 2>/dev/null &
child $!
input=$child
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
