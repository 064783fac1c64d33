# shell_kernel: find and signal a session's processes. POSIX sh, run beside
# the shell (locally, or through the SSH connection), never inside it.
#
#   reap.sh tree    -   SHELL STATE_DIR SEQ          print the running cell's processes
#   reap.sh cell    SIG SHELL STATE_DIR SEQ [TOKEN..]  signal them (and the noted ones
#                                                  still alive), then SIGINT the shell
#   reap.sh orphans SIG SHELL STATE_DIR TOKEN..    signal what is left of the noted
#                                                  processes and their descendants
#   reap.sh all     -   SHELL STATE_DIR            stop everything the session
#                                                  started, remove STATE_DIR (and
#                                                  print "left PID..." for what
#                                                  would not end)
#   reap.sh ended   -   SHELL STATE_DIR SEQ        print "yes" if cell SEQ has ended
#
# The running cell's processes are the shell's descendants, minus the trees
# of background jobs that earlier cells left running (STATE_DIR/jobs: the
# shell's children when the last cell ended, all of them background jobs).
# tree prints them as PID:START tokens, START telling when the process
# started: given back later, a token is signalled only while its pid still
# names that process, not another that reused the pid. Noted processes cover
# those that left the tree (a killed parent's children are re-parented to
# init). cell, orphans and all print the pids they signalled.
#
# SEQ is the cell that tree and cell are for ("-": whatever runs, for a
# query): they do nothing once that cell has ended. An interrupt's steps
# run beside the shell while the cell's end is on its way, and by then the
# next cell may run: a late SIGTERM step would kill its processes, and its
# SIGURG abandon its command line, whose end then never came.

mode=$1 sig=$2 root=$3 dir=$4
shift 4
seq=-
case $mode in tree | cell | ended) if [ $# -gt 0 ]; then seq=$1; shift; fi ;; esac
noted=$*

#include pids.sh

# The awk rule that reads the process table and calls row(PID, PPID, SID,
# PGID, STATE) for each process: with raw set, the text of /proc/*/stat
# (where there is a /proc: less than half of what ps costs, as ps reads two
# files a process and starts slower, which counts on a host with many
# sessions, each scanning the whole table when it ends); else the rows
# table prints. A stat line is "PID (NAME) STATE PPID PGRP SID ...", NAME
# being anything, even ") " and newlines: a record ends where the text
# after its last ") " has all the fields.
rows_awk='
!raw { row($1, $2, $3, $4, $5); next }
{ record = (record == "") ? $0 : record "\n" $0
  rest = record; sub(/.*\) /, "", rest)
  if (split(rest, v, " ") < 20) next
  split(record, head, " "); row(head[1], v[2], v[4], v[3], v[1]); record = "" }'

# proc_stats: the text of every /proc/*/stat (rows_awk's with raw set).
proc_stats() {
  cat /proc/[0-9]*/stat 2>/dev/null
}

# Prints "pid ppid sid pgid state" a line: from /proc/*/stat where there is
# a /proc, else ps, with "-" for sid and pgid where ps has no sid (it is not
# POSIX).
table() {
  if procfs; then
    rows=$(proc_stats | awk -v raw=1 "$rows_awk"'
      function row(p, pp, s, g, st) { print p, pp, s, g, st }')
    # Empty only if reading /proc failed (this shell is in it): ps then.
    if [ -n "$rows" ]; then printf '%s\n' "$rows"; return; fi
  fi
  ps -A -o pid= -o ppid= -o sid= -o pgid= -o stat= 2>/dev/null ||
    ps -A -o pid= -o ppid= -o stat= | awk '{ print $1, $2, "-", "-", $3 }'
}

# The awk function members(SCOPE, FORMAT), over the processes given to
# row(): SCOPE cell (the cell's tree and the noted processes), orphans (the
# noted processes and their descendants: the cell is over, and the jobs
# file now lists its own background jobs, which belong to the interrupted
# cell too) or all (every descendant and every member of the shell's
# session); FORMAT tokens (PID:START tokens) or anything else (pids); each
# followed by a space. It reads the awk variables root, jobs, noted and
# procfs (members below sets them).
members_awk='
function row(p, pp, s, g, st) { parent[p] = pp; sid[p] = s; group[p] = g; order[++rows] = p }
# When process p started, as pid_start (pids.sh) tells it; "" if it is
# gone or no start can be told here. Field 22 of /proc/p/stat (clock
# ticks after boot; the command name before it may hold anything, even
# ") " and newlines), else ps: its group and lstart (in UTC, as pids.sh).
function started(p,   file, line, text, n, v) {
  if (!procfs) return lstart(p)
  file = "/proc/" p "/stat"
  while ((getline line < file) > 0) text = text line "\n"
  close(file)
  sub(/.*\) /, "", text)
  n = split(text, v, " ")
  return n >= 20 ? v[20] : ""
}
function lstart(p,   command, line, v, n, i, when) {
  if (!lstart_read) {
    lstart_read = 1
    command = "TZ=UTC0 LC_ALL=C ps -A -o pid= -o pgid= -o lstart= 2>/dev/null"
    while ((command | getline line) > 0) {
      if (split(line, v, " ") != 7) continue
      when = v[2]
      for (i = 3; i <= 7; i++) when = when "," v[i]
      started_at[v[1]] = when; lstart_seen = 1
    }
    close(command)
  }
  return (p in started_at) ? started_at[p] : ""
}
# PID:START; PID alone where no start can be told; "" once p is gone.
function token(p,   when) {
  when = started(p)
  if (when != "") return p ":" when
  return (procfs || lstart_seen) ? "" : p
}
# The pid a noted token names if it is still that process, else "". A
# token without START (its start could not be told) is taken as it is.
function still(noted_token,   colon, p, when) {
  colon = index(noted_token, ":")
  if (!colon) return noted_token
  p = substr(noted_token, 1, colon - 1)
  when = substr(noted_token, colon + 1)
  return (when == "" || same_start(when, started(p))) ? p : ""
}
function members(scope, format,   session, n, i, p, q, hops, verdict, t, out) {
  # The shell is not always its session leader (a durable session has a
  # wrapper above it); its session is what its background daemons share.
  session = (sid[root] ~ /^[0-9]+$/) ? sid[root] : root
  n = split(jobs, s, /[ \n]+/)
  for (i = 1; i <= n; i++) if (s[i] != "") excluded[s[i]] = 1
  n = split(noted, s, /[ \n]+/)
  for (i = 1; i <= n; i++) if (s[i] != "" && (p = still(s[i])) != "") listed[p] = 1
  for (i = 1; i <= rows; i++) {
    p = order[i]
    if (p == root) continue
    q = p; hops = 0; verdict = (p in listed)
    if (scope == "all" && sid[p] == session) { verdict = 1; q = "" }
    while (q != "" && q > 1 && hops++ < 128) {
      if (q in excluded) { verdict = 0; break }
      if (scope == "orphans") { if (q in listed) { verdict = 1; break } }
      else if (parent[q] == root) { verdict = 1; break }
      q = parent[q]
    }
    if (!verdict) continue
    if (format != "tokens") out = out p " "
    else if ((t = token(p)) != "") out = out t " "
  }
  return out
}'

# members SCOPE [tokens]: members(SCOPE, FORMAT) of the table (or of
# $snapshot, a table read before).
members() {
  jobs=
  if [ "$1" = cell ] && [ -r "$dir/jobs" ]; then jobs=$(cat "$dir/jobs"); fi
  with_proc=
  if procfs; then with_proc=yes; fi
  { if [ -n "${snapshot-}" ]; then printf '%s\n' "$snapshot"; else table; fi; } |
    awk -v root="$root" -v jobs="$jobs" -v noted="$noted" -v procfs="$with_proc" \
      -v scope="$1" -v format="${2-}" "$pid_awk$members_awk$rows_awk"'
    END { printf "%s", members(scope, format) }'
}

# ignores_term PID: PID ignores SIGTERM (bit 15 of SigIgn in its status),
# read without a fork; false where that cannot be told (no /proc).
ignores_term() {
  procfs || return 1
  { while read -r key mask; do
      [ "$key" = SigIgn: ] && break
    done < "/proc/$1/status"; } 2>/dev/null
  [ "$key" = SigIgn: ] || return 1
  # SIGTERM's bit, 0x4000: the fourth hex digit from the right.
  mask=${mask%???}
  case ${mask#"${mask%?}"} in [4567cdefCDEF]) return 0 ;; esac
  return 1
}

# still_running PID: running, where that costs no fork (/proc); else
# whether a process has the pid (a zombie counts as running then).
still_running() {
  if procfs; then running "$1"; else kill -0 "$1" 2>/dev/null; fi
}

# True while cell $seq has not ended: the status file (session.bash) starts
# with the number of the last cell that ended, and only the shell writes it.
cell_running() {
  [ "$seq" = - ] && return 0
  ended=
  { read -r ended < "$dir/status"; } 2>/dev/null
  case $ended in '' | *[!0-9]*) ended=0 ;; esac
  [ "$ended" -lt "$seq" ]
}

case $mode in
  ended)
    # Its end may still be on its way to the kernel (see interrupts.py).
    [ "$seq" != - ] && ! cell_running && echo yes
    ;;
  tree)
    # Checked after the listing: the cell was still running when it was made.
    tokens=$(members cell tokens)
    cell_running && printf '%s' "$tokens"
    ;;
  orphans)
    pids=$(members orphans)
    [ -n "$pids" ] && kill -"$sig" $pids 2>/dev/null
    echo $pids
    ;;
  cell)
    # Only while ROOT is the shell that STATE_DIR records: a shell that is
    # gone may have left its pid to a stranger, whose tree is no cell's.
    pid_alive "$dir/shell.start" && [ "$recorded" = "$root" ] || exit 0
    pids=$(members cell)
    # Checked after the listing (it may hang on /proc: the shell is never
    # held then), so the cell was still running when it was made.
    if [ "$sig" = INT ]; then
      # Sent as a terminal's Ctrl-C is, to a shell that runs (not held):
      # the next cell is sent only once the kernel has this one's end,
      # long after this check. The shell first: bash 3.2 and 4.2 abandon
      # the line only if they got SIGINT themselves before the child they
      # wait for died of it (else `sleep 9; echo after` prints after).
      if cell_running; then kill -INT "$root" $pids 2>/dev/null; else pids=; fi
    else
      # Held still from the check on: a cell it has not ended cannot end,
      # nor the next one start, before the signals are sent.
      kill -STOP "$root" 2>/dev/null
      if ! cell_running; then
        kill -CONT "$root" 2>/dev/null
        exit 0
      fi
      # A shell whose child died of anything but SIGINT carries on with the
      # next command. Hold it still, kill, then SIGURG it: it resumes with
      # the signal pending, and its trap (session.bash) has it SIGINT
      # itself before the next command. Only shell builtins run while it is
      # held: nothing there can hang, so a side command timing out (this
      # script killed) never leaves the shell stopped.
      [ -n "$pids" ] && kill -"$sig" $pids 2>/dev/null
      kill -URG "$root" 2>/dev/null
      kill -CONT "$root" 2>/dev/null
    fi
    echo $pids
    ;;
  all)
    # One read of the table, and one awk, for all of it, and a second read
    # only where it may be needed: where sessions end together (a fleet's),
    # each reads every process's entry, and those reads are most of the cost.
    # It prints the session's members as tokens, then facts of the table:
    # the session's id (the root's, or the root's pid once it is gone, as
    # members tells it); whether the root is in the table; this script and
    # its ancestors, spared (a durable shell started on a host without
    # setsid shares the session of the SSH session that started it, which
    # may be the one running this); the session's process groups with
    # nothing spared in them; and "one" where the root and every member are
    # in the session's own group, nothing spared in it.
    facts_awk='
    END {
      if (raw && !rows) exit
      tokens = members("all", "tokens")
      print tokens
      session = (sid[root] ~ /^[0-9]+$/) ? sid[root] : root
      print session
      print (root in parent) ? "seen" : "gone"
      for (p = me; p != "" && p > 1 && hops++ < 128; p = parent[p]) {
        spared = spared " " p; kept[group[p]] = 1
        if (sid[p] == session) shared = 1
      }
      print spared " "
      for (p in parent)
        if (sid[p] == session && group[p] ~ /^[0-9]+$/ && group[p] > 1 && !(group[p] in kept))
          groups[group[p]] = 1
      for (g in groups) printf "-%s ", g
      print ""
      one = !shared && !(root in parent && (sid[root] != session || group[root] != session))
      n = split(tokens, each, " ")
      for (i = 1; i <= n; i++) {
        p = each[i]; sub(/:.*/, "", p)
        if (sid[p] != session || group[p] != session) one = 0
      }
      print one ? "one" : "many"
    }'
    with_proc=
    if procfs; then with_proc=yes; fi
    facts=
    # With raw: nothing if reading /proc failed (this shell is in it): ps then.
    [ -z "$with_proc" ] || facts=$(proc_stats | awk -v raw=1 -v root="$root" -v me="$$" -v jobs= \
      -v noted="$noted" -v procfs=yes "$pid_awk$members_awk$rows_awk$facts_awk")
    [ -n "$facts" ] || facts=$(table | awk -v root="$root" -v me="$$" -v jobs= \
      -v noted="$noted" -v procfs="$with_proc" "$pid_awk$members_awk$rows_awk$facts_awk")
    nl='
'
    tokens=${facts%%"$nl"*} facts=${facts#*"$nl"}
    session=${facts%%"$nl"*} facts=${facts#*"$nl"}
    seen=${facts%%"$nl"*} facts=${facts#*"$nl"}
    spared=${facts%%"$nl"*} facts=${facts#*"$nl"}
    groups=${facts%%"$nl"*} layout=${facts#*"$nl"}
    # The root is signalled, and its tree and session reaped, only while it
    # is the process that STATE_DIR records (shell.start: the shell's, as
    # session.bash wrote it; wrapper.pid: a durable session's wrapper): once
    # that one is gone, its pid may name anyone's process (a host that
    # rebooted, a session killed by the OOM killer). A root that is gone
    # still has its session reaped: no process is handed the pid of a
    # session that has a member left.
    reap=
    for record in "$dir/shell.start" "$dir/wrapper.pid"; do
      pid_alive "$record" && [ "$recorded" = "$root" ] && reap=all
    done
    [ -z "$reap" ] && [ "$seen" = gone ] && reap=session
    # PID:START tokens: what is still alive after SIGTERM gets SIGKILL only
    # while it is the same process.
    kept=
    if [ -n "$reap" ]; then
      for t in $tokens; do
        case $spared in *" ${t%%:*} "*) ;; *) kept="$kept $t" ;; esac
      done
    fi
    tokens=$kept pids=
    for t in $tokens; do pids="$pids ${t%%:*}"; done
    if [ -n "$pids" ]; then
      kill -TERM $pids 2>/dev/null
      # Up to 0.5 s for them to end, but for those that ignore SIGTERM (an
      # interactive shell does): nothing to wait for there.
      waited=
      for p in $pids; do ignores_term "$p" || waited="$waited $p"; done
      n=0
      while [ $n -lt 10 ]; do
        alive=
        for p in $waited; do still_running "$p" && alive="$alive $p"; done
        [ -z "$alive" ] && break
        sleep 0.05 2>/dev/null || sleep 1
        n=$((n + 1))
      done
      for t in $tokens; do
        still_running "${t%%:*}" && pid_is "${t%%:*}" "${t#*:}" && kill -KILL "${t%%:*}" 2>/dev/null
      done
    fi
    [ "$reap" = all ] && kill -KILL "$root" 2>/dev/null
    # Their process groups too, those of the session's own (a group never
    # spans sessions) with nothing spared in them: a group's signal reaches
    # every member, even one forked as it goes out, which a listing cannot
    # (a cell whose processes keep forking).
    [ -n "$reap" ] && [ -n "$groups" ] && kill -KILL $groups 2>/dev/null
    # Done once nothing of the session runs. Where all of it was one group
    # (a session whose cells never used job control or moved a process to
    # a group of its own), that group's signal reached everything in it,
    # what was forked after the listing too: done once the listed ones and
    # the root have ended, told without reading the table again. Else, or
    # where one of them is slow to end, what the root or any member started
    # while the signals went out (a shell still starting into its
    # PROMPT_COMMAND, a job forking in a group of its own) was in no
    # listing, and what was killed may take a moment to die on a loaded
    # host: listed again and killed until none is left, for 5 s at most;
    # what still runs then (a process that cannot die, in uninterruptible
    # sleep) is printed on a last line "left PID...".
    if [ -n "$reap" ] && [ "$layout" = one ]; then
      own=
      [ "$reap" = all ] && own=$root
      n=0
      while [ $n -lt 10 ]; do
        alive=
        for p in $pids $own; do still_running "$p" && alive="$alive $p"; done
        [ -z "$alive" ] && break
        sleep 0.05 2>/dev/null || sleep 1
        n=$((n + 1))
      done
      [ -z "$alive" ] && reap=
    fi
    left=
    n=0
    while [ -n "$reap" ]; do
      snapshot=$(table)
      # Those not ended (a zombie has: where nothing reaps it, a container's
      # init, it stays), as the table tells them: no fork per process.
      left=$(printf '%s\n' "$snapshot" | awk -v members=" $(members all) " -v spared="$spared" \
        -v root="$(if [ "$reap" = all ]; then echo "$root"; fi)" '
        (index(members, " " $1 " ") || $1 == root) && !index(spared, " " $1 " ") && $5 !~ /^Z/ {
          printf " %s", $1 }')
      [ -n "$left" ] && [ $n -lt 50 ] || break
      groups=$(printf '%s\n' "$snapshot" | awk -v session="$session" -v spared="$spared" '
        index(spared, " " $1 " ") { kept[$4] = 1; next }
        session != "" && $3 == session && $4 ~ /^[0-9]+$/ && $4 > 1 { group[$4] = 1 }
        END { for (g in group) if (!(g in kept)) printf "-%s ", g }')
      kill -KILL $left $groups 2>/dev/null
      pids="$pids $left"
      sleep 0.1 2>/dev/null || sleep 1
      n=$((n + 1))
    done
    pid_kill TERM "$dir/watchdog.pid"
    # A durable session's attached relay ends, with the status that says the
    # shell ended (relay.sh): its watchdog would tell it, but is gone with
    # DIR. (Not the relay that runs this, at the end of its grace.)
    if pid_alive "$dir/relay.pid"; then
      case $spared in *" $recorded "*) ;; *) kill -USR1 "$recorded" 2>/dev/null ;; esac
    fi
    case $dir in
      */shell_kernel.* | */shell_kernel-[0-9]*/*) [ -d "$dir" ] && [ ! -L "$dir" ] && rm -rf -- "$dir" ;;
    esac
    echo $pids
    [ -z "$left" ] || echo "left$left"
    ;;
  *)
    echo "reap.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
exit 0
