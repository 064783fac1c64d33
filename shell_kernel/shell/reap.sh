# shell_kernel: signal a session's processes. POSIX sh, run beside the shell
# (locally or through the SSH connection), never inside it.
#
#   reap.sh cell  SIGNAL SHELL_PID STATE_DIR   the running cell's processes
#   reap.sh shell SIGNAL SHELL_PID STATE_DIR   the same, then the shell itself
#   reap.sh all   -      SHELL_PID STATE_DIR   everything the session started,
#                                              then remove STATE_DIR
#
# The running cell's processes are the shell's descendants, minus the trees
# of background jobs that earlier cells left running (STATE_DIR/jobs, written
# by the shell at the end of every cell). Prints the pids it signalled.

mode=$1 sig=$2 root=$3 dir=$4

table() {
  # pid ppid sid, one process a line; sid is not POSIX, so fall back.
  ps -A -o pid= -o ppid= -o sid= 2>/dev/null || ps -A -o pid= -o ppid=
}

select_pids() {
  # $1: "cell" (skip earlier jobs) or "all" (every descendant and session member)
  skip=
  if [ "$1" = cell ] && [ -r "$dir/jobs" ]; then skip=$(cat "$dir/jobs"); fi
  table | awk -v root="$root" -v skip="$skip" -v scope="$1" '
    { parent[$1] = $2; sid[$1] = $3; order[NR] = $1 }
    END {
      n = split(skip, s, /[ \n]+/)
      for (i = 1; i <= n; i++) if (s[i] != "") excluded[s[i]] = 1
      for (i = 1; i <= NR; i++) {
        p = order[i]
        if (p == root) continue
        if (scope == "all" && sid[p] == root) { print p; continue }
        q = p; hops = 0
        while (q != "" && q > 1 && hops++ < 128) {
          if (q in excluded) break
          if (parent[q] == root) { print p; break }
          q = parent[q]
        }
      }
    }'
}

case $mode in
  cell|shell)
    pids=$(select_pids cell)
    [ "$mode" = shell ] && pids="$pids $root"
    ;;
  all)
    pids=$(select_pids all)
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
    case $dir in
      */shell_kernel.*) [ -d "$dir" ] && [ ! -L "$dir" ] && rm -rf -- "$dir" ;;
    esac
    echo $pids
    exit 0
    ;;
  *) echo "reap.sh: unknown mode $mode" >&2; exit 2 ;;
esac

pids=$(echo $pids)
[ -n "$pids" ] && kill -"$sig" $pids 2>/dev/null
echo "$pids"
exit 0
