# shell_kernel: start and look after durable sessions on this host. POSIX sh.
#
#   launch.sh start IDLE_TIMEOUT GENERATION KEEP STALL REAP_SCRIPT SPOOL_SCRIPT BASH_ARG...
#   launch.sh open NAME OWNER TAKE_OVER IDLE_TIMEOUT GENERATION ... BASH_ARG...
#                              the named session NAME: attach to it, or start it
#   launch.sh alive DIR PID [OWNER]  prints "alive" while the session is there
#                              (and, named, still OWNER's: else "taken SINCE")
#   launch.sh status DIR       prints the shell's exit status, once it has ended
#   launch.sh stop DIR         stops what the session started, removes DIR
#   launch.sh list             one line per named session of this user
#   launch.sh kill NAME        stops the named session NAME: prints killed once
#                              all of it has ended, else "left PID..."
#   launch.sh sweep            removes this user's state directories that
#                              provably belong to no process any more (in
#                              the background; start and open do it too)
#
# Its jobs are in the files put into it by "#include" (each run as part of
# this script, sent with each call): launcher.sh starts a session (the
# detached shell, its watchdog) and stops one; named.sh is the registry of
# named sessions (open, list, kill); sweep.sh removes the state directories
# of sessions provably gone.

mode=$1
shift

#include pids.sh
#include launcher.sh
#include named.sh
#include sweep.sh

case $mode in
  start) start "$@"; sweep_in_background ;;
  open) open_named "$@"; sweep_in_background ;;
  alive) alive "$@" ;;
  list) list ;;
  kill) kill_named "$1" ;;
  status) cat "$1/exit_status" 2>/dev/null ;;
  stop) stop "$1" ;;
  sweep) sweep_in_background ;;
  *)
    echo "launch.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
