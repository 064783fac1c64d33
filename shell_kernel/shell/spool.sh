# shell_kernel: the output spool of a durable session. POSIX sh, on the host.
#
#   spool.sh copy   PREFIX GENERATION KEEP STALL  standard input into the spool
#   spool.sh follow PREFIX OFFSET MARKER RELAY    print the spool from OFFSET, live
#   spool.sh end    PREFIX                        the stream offset after its last byte
#
# The shell writes each stream into a FIFO; a copier (copy) appends what it
# reads to generation files PREFIX.START (PREFIX is DIR/out or DIR/err),
# START being the stream offset of the file's first byte. Only the copier
# writes them, only to the newest, and it starts a new one once the newest
# holds GENERATION bytes: a file that has a newer one never changes again.
# So old output is dropped by deleting whole files, never by truncating a file
# that something may be writing at that moment, and a stream offset means the
# same byte whatever was dropped before it. The kernel's acknowledgements
# (relay.sh) delete the generations it has received, and record when it
# last sent one (acked): a kernel that did so within STALL seconds is
# reading, and the copier keeps everything for it, however far behind it is
# (a fast producer, a slow link).
# Once no kernel has acknowledged anything for STALL seconds (it is away, or
# a laptop asleep holds up the relay), the copier keeps only the newest KEEP
# bytes of its stream; the kernel says how much was dropped when it resumes.

mode=$1
shift

#include pids.sh

# The start offsets of a stream's generation files, ascending (sorted only
# where there are several: sort forks).
generations() {
  set -- "$1" "$1".[0-9]*
  if [ $# -eq 2 ]; then
    n=${2#"$1".}
    case $n in *[!0-9]*) ;; *) echo "$n" ;; esac
    return
  fi
  for f in "$1".[0-9]*; do
    n=${f#"$1".}
    case $n in *[!0-9]*) ;; *) echo "$n" ;; esac
  done | sort -n
}

# drop PREFIX OFFSET: delete the generations that end before OFFSET (where
# the next one starts), never the newest.
drop() {
  dropping=$1 before=$2
  # One generation (or none) is the newest: nothing to list (listing forks).
  set -- "$1".[0-9]*
  [ $# -gt 1 ] || return 0
  set -- $(generations "$dropping")
  while [ $# -gt 1 ]; do
    [ "$2" -lt "$before" ] && rm -f "$dropping.$1"
    shift
  done
}

# Is a kernel attached (a relay runs) that acknowledged received output
# within the last STALL seconds? (Without `date +%s` the answer is no: the
# spool stays bounded.)
kernel_reading() {
  pid_alive "${prefix%/*}/relay.pid" || return 1
  read -r acked 2>/dev/null < "${prefix%/*}/acked" || return 1
  now=$(date +%s 2>/dev/null) || return 1
  case $now$acked in *[!0-9]*) return 1 ;; esac
  # Whole seconds: -le, so that a kernel is taken for away only after STALL
  # seconds at least (-lt would after STALL - 1 and a fraction).
  [ $((now - acked)) -le "$stall" ]
}

copy() {
  prefix=$1 generation=$2 keep=$3 stall=$4
  start=0 size=0
  file=$prefix.0
  while :; do
    # dd writes each read as it gets it; at most 4 MiB per run, so that a
    # new generation starts soon after the newest has grown past GENERATION.
    records= copied=
    if LC_ALL=C dd bs=4096 count=1024 2>"$prefix.dd" >>"$file"; then
      # "F+P records in", and (GNU, BusyBox, BSD; not POSIX) "N bytes ...".
      while read -r first rest; do
        case $rest in
          "records in") records=$first ;;
          bytes*) copied=$first ;;
        esac
      done < "$prefix.dd"
      [ "$records" = 0+0 ] && exit 0  # every writer has closed the FIFO
    else
      [ -f "$file" ] || exit 0  # the session was removed
    fi
    case $copied in
      '' | *[!0-9]*) size=$(($(wc -c < "$file"))) ;;
      *) size=$((size + copied)) ;;
    esac
    [ "$size" -lt "$generation" ] && continue
    start=$((start + size)) size=0
    file=$prefix.$start
    : >> "$file"
    # Tell the followers of this stream where the new generation starts.
    for wake in "$prefix".wake.*; do
      [ -p "$wake" ] && echo "$start" 1<>"$wake"
    done
    kernel_reading || drop "$prefix" $((start - keep))
  done
}

# follow PREFIX OFFSET MARKER RELAY: prints a header line "MARKER:START",
# START being the stream offset of the bytes that follow (later than OFFSET
# when the host dropped older output meanwhile), then the stream, live. When
# a generation it needs is gone (dropped while it lagged behind) it signals
# RELAY (USR2) to end the relay: the next one starts after the gap, and says so.
follow() {
  prefix=$1 at=$2 marker=$3 relay=$4
  read_start "$relay"  # it is this one's parent, alive now
  relay_start=$pid_now
  wake=$prefix.wake.$$ count=$prefix.count.$$ tailpid=$prefix.tail.$$
  tail=
  trap 'clean_up; exit 0' TERM
  mkfifo "$wake" "$count" "$tailpid" || fail
  # Held open for reading and writing: a wake-up written while this one is
  # busy waits in it, and opening it never blocks (and so for tail's pid).
  exec 6<>"$wake" 7<>"$tailpid"
  drop "$prefix" "$at"
  set -- $(generations "$prefix")
  [ $# -gt 0 ] || fail
  [ "$1" -gt "$at" ] && at=$1
  printf '%s:%s\n' "$marker" "$at"
  pos=$((at - $1))
  while :; do
    gen=$1
    shift
    if [ $# -eq 0 ]; then
      live "$prefix.$gen"
      set -- "$next"
    fi
    # The rest of a generation that has a newer one: it no longer changes.
    tail -c +$((pos + 1)) "$prefix.$gen" || fail
    pos=0
  done
}

# live FILE: prints FILE from $pos as the copier appends to it, until the
# copier says (on the wake FIFO) that a newer generation, $next, started;
# adds to $pos what it printed. tail -f cannot be told to stop at the end of
# the file, so it is killed, and tee counts what it had passed on by then.
live() {
  wc -c < "$count" > "$count.n" &
  counter=$!
  # tail says its own pid, on the FIFO $tailpid: a signal sent to a child
  # this shell has just forked can be lost before the child starts tail.
  sh -c 'echo $$ 1<>"$1"; exec tail -c +"$2" -f "$3"' tail "$tailpid" $((pos + 1)) "$1" |
    tee "$count" &
  tee=$!
  tail=
  read -r tail <&7
  read_start "$tail"
  tail="$tail $pid_now"  # signalled only while it is that process
  next=$gen
  until [ "$next" -gt "$gen" ]; do
    read -r next <&6 || next=$gen
  done
  pid_is $tail && kill -KILL "${tail%% *}"
  tail=
  wait "$tee" "$counter"
  read -r printed < "$count.n"
  pos=$((pos + printed))
}

# (Nothing to remove once the session's directory went with its end.)
clean_up() {
  pid_is $tail && kill -KILL "${tail%% *}" 2>/dev/null
  [ ! -d "${prefix%/*}" ] || rm -f "$wake" "$count" "$count.n" "$tailpid"
}

fail() {
  clean_up
  pid_is "$relay" "${relay_start-}" && kill -USR2 "$relay" 2>/dev/null
  exit 1
}

case $mode in
  copy) copy "$@" ;;
  follow) follow "$@" ;;
  end)
    set -- "$1" $(generations "$1")
    [ $# -gt 1 ] || { echo 0; exit 0; }
    eval "last=\${$#}"
    echo $((last + $(wc -c < "$1.$last")))
    ;;
  *)
    echo "spool.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
