# shell_kernel: find and signal a session's processes. POSIX sh, run beside
# the shell (locally, or through the SSH connection), never inside it.
#
#   reap.sh tree    -   SHELL STATE_DIR          print the running cell's processes
#   reap.sh cell    SIG SHELL STATE_DIR [PID..]  signal them (and the listed PIDs
#                                                still alive), then SIGINT the shell
#   reap.sh orphans SIG SHELL STATE_DIR PID..    signal what is left of PIDs
#                                                and their descendants
#   reap.sh all     -   SHELL STATE_DIR          stop everything the session
#                                                started, remove STATE_DIR
#
# The running cell's processes are the shell's descendants, minus the trees
# of background jobs that earlier cells left running (STATE_DIR/jobs, which
# the shell rewrites at the end of every cell). Listed PIDs cover processes
# that left the tree (a killed parent's children are re-parented to init).
# Each mode prints the pids it signalled.

mode=$1 sig=$2 root=$3 dir=$4
shift 4
extra=$*

# Prints "pid ppid sid" a line; sid is not POSIX, so fall back without it.
table() {
  ps -A -o pid= -o ppid= -o sid= 2>/dev/null || ps -A -o pid= -o ppid=
}

# $1: cell (the cell's tree and the extra pids), orphans (the extra pids
# and their descendants: the cell is over, and the jobs file now lists its
# own background jobs, which belong to the interrupted cell too) or all
# (every descendant and every member of the shell's session).
members() {
  skip=
  if [ "$1" = cell ] && [ -r "$dir/jobs" ]; then skip=$(cat "$dir/jobs"); fi
  table | awk -v root="$root" -v skip="$skip" -v extra="$extra" -v scope="$1" '
    { parent[$1] = $2; sid[$1] = $3; order[NR] = $1 }
    END {
      # The shell is not always its session leader (a durable session has a
      # wrapper above it); its session is what its background daemons share.
      session = (root in sid && sid[root] != "") ? sid[root] : root
      n = split(skip, s, /[ \n]+/)
      for (i = 1; i <= n; i++) if (s[i] != "") excluded[s[i]] = 1
      n = split(extra, s, /[ \n]+/)
      for (i = 1; i <= n; i++) if (s[i] != "") listed[s[i]] = 1
      for (i = 1; i <= NR; i++) {
        p = order[i]
        if (p == root) continue
        if (scope == "all" && sid[p] == session) { print p; continue }
        q = p; hops = 0; verdict = (p in listed)
        while (q != "" && q > 1 && hops++ < 128) {
          if (q in excluded) { verdict = 0; break }
          if (scope == "orphans") { if (q in listed) { verdict = 1; break } }
          else if (parent[q] == root) { verdict = 1; break }
          q = parent[q]
        }
        if (verdict) print p
      }
    }' | tr '\n' ' '
}

case $mode in
  tree)
    members cell
    ;;
  orphans)
    pids=$(members orphans)
    [ -n "$pids" ] && kill -"$sig" $pids 2>/dev/null
    echo $pids
    ;;
  cell)
    if [ "$sig" = INT ]; then
      pids=$(members cell)
      kill -INT $pids "$root" 2>/dev/null
    else
      # A shell whose child died of anything but SIGINT carries on with the
      # next command. Hold it still, kill, then SIGINT it, so that when it
      # resumes it abandons the command line instead.
      kill -STOP "$root" 2>/dev/null
      trap 'kill -CONT "$root" 2>/dev/null' EXIT
      pids=$(members cell)
      [ -n "$pids" ] && kill -"$sig" $pids 2>/dev/null
      kill -INT "$root" 2>/dev/null
    fi
    echo $pids
    ;;
  all)
    pids=$(members all)
    if [ -n "$pids" ]; then
      kill -TERM $pids 2>/dev/null
      n=0
      while [ $n -lt 10 ]; do
        alive=
        for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
        [ -z "$alive" ] && break
        sleep 0.05 2>/dev/null || sleep 1
        n=$((n + 1))
      done
      [ -n "$alive" ] && kill -KILL $alive 2>/dev/null
    fi
    kill -KILL "$root" 2>/dev/null
    [ -r "$dir/watchdog.pid" ] && kill "$(cat "$dir/watchdog.pid")" 2>/dev/null
    case $dir in
      */shell_kernel.*) [ -d "$dir" ] && [ ! -L "$dir" ] && rm -rf -- "$dir" ;;
    esac
    echo $pids
    ;;
  *)
    echo "reap.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
exit 0
