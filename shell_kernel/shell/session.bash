# shell_kernel: set up a persistent bash as a kernel session.
#
# Runs once, after the user's rc files, inside the user's interactive bash.
# The kernel sends it prefixed with `__shell_kernel_token=...`. Every command
# is spelled so that user redefinitions (echo, printf, cd, command, ...) and
# shell options (set -u/-e/-f/-x, IFS, noclobber, failglob) cannot change it.
#
# Channels: the kernel's stdout/stderr streams are saved on fds 61/62, and
# the shell's own fds 1/2 go to /dev/null, so prompts, job notices and rc
# noise never reach a cell. Each cell runs as
#     builtin eval -- $'<cell>' </dev/null >&61 2>&62
#     __shell_kernel_post "$?" <seq>
# and the post hook writes the status file and an end frame on both streams.
# Frames start with \036\037 + a per-session token, bytes that `set`,
# `declare -p` and `env` never print raw, so no state dump can fake one.

exec 61>&1 62>&2 1>/dev/null 2>/dev/null

__shell_kernel_pid=$$
__shell_kernel_dir=$(builtin umask 077 && builtin command mktemp -d "${TMPDIR:-/tmp}/shell_kernel.XXXXXXXXXX" 2>/dev/null) \
  || { __shell_kernel_dir=${TMPDIR:-/tmp}/shell_kernel.$$.$RANDOM$RANDOM$RANDOM \
       && builtin command mkdir -m 700 -- "$__shell_kernel_dir"; } \
  || __shell_kernel_dir=
if [[ -n $__shell_kernel_dir ]]; then
  (builtin umask 077 && builtin : >| "$__shell_kernel_dir/status" && builtin : >| "$__shell_kernel_dir/jobs") 2>/dev/null
fi

# The prompt machinery is useless without a terminal and would only cost
# time (a PS1 with $(git ...) forks twice per cell).
PS1= PS2= PS0= PS4='+ '
builtin unset -v PROMPT_COMMAND MAILCHECK HISTFILE
builtin set +o history +o monitor
builtin shopt -s huponexit 2>/dev/null

# Programs must never wait for a terminal: no pagers, unbuffered Python.
builtin export PAGER=cat GIT_PAGER=cat MANPAGER=cat SYSTEMD_PAGER= \
  PYTHONUNBUFFERED=1 TERM=dumb

# End of a cell: record the status, then frame the end on both streams.
# The kernel sends
#     __shell_kernel_rc=$? __shell_kernel_flags=$-; builtin set +T; __shell_kernel_post <seq>
# so that a user's DEBUG trap under `set -T` (which could `return` from this
# function) is not inherited; -T is restored on the way out.
# The kernel sends the line again after an interrupt, in case the first was
# cut short; a repeat only repeats the frame.
__shell_kernel_post() {
  builtin local seq=$1 status=$__shell_kernel_rc
  if [[ -n ${__shell_kernel_exit-} ]]; then
    status=$__shell_kernel_exit
    builtin unset -v __shell_kernel_exit
  fi
  if (( seq > ${__shell_kernel_done:-0} )); then
    __shell_kernel_done=$seq
    if [[ -n ${__shell_kernel_dir-} ]]; then
      { builtin printf '%s\n%s\n%s' "$seq" "$status" "${PWD-}" >| "$__shell_kernel_dir/status"
        builtin jobs -p >| "$__shell_kernel_dir/jobs"
        if [[ -n ${__shell_kernel_snapshot-} ]]; then
          builtin export -p >| "$__shell_kernel_dir/exports"
        fi; } 2>/dev/null || builtin true
    fi
  fi
  if (( seq == __shell_kernel_done )); then  # else: a late repeat for a cell long over
    builtin printf '\036\037%s\037end\037%s\037%s\037%s\037\036' \
      "$__shell_kernel_token" "$seq" "$status" "${PWD-}" >&61 2>/dev/null || builtin true
    builtin printf '\036\037%s\037end\037%s\037\036' \
      "$__shell_kernel_token" "$seq" >&62 2>/dev/null || builtin true
  fi
  if [[ $__shell_kernel_flags == *T* ]]; then builtin set -T; fi
}

# `exit N` in a cell ends that cell with status N and keeps the shell, as a
# notebook user expects. It unwinds the running cell the way Ctrl-C does (an
# interactive bash abandons the command line on SIGINT and keeps its state).
# Subshells, and shells that trap or ignore SIGINT, really exit.
exit() {
  builtin local status=$?
  if [[ $BASHPID != "${__shell_kernel_pid-}" ]]; then builtin exit "$@"; fi
  if [[ -n ${1-} ]]; then
    if [[ $1 =~ ^(-?)0*([0-9]+)$ ]]; then
      status=$(( ${BASH_REMATCH[1]}${BASH_REMATCH[2]} & 255 ))
    else
      builtin printf 'bash: exit: %s: numeric argument required\n' "$1" >&2
      status=2
    fi
  fi
  __shell_kernel_exit=$status
  builtin kill -INT "$__shell_kernel_pid"
  builtin exit "$status"
}

builtin printf '\036\037%s\037ready\037%s\037%s\037%s\037\036' \
  "$__shell_kernel_token" "$$" "$BASH_VERSION" "$__shell_kernel_dir" >&61
builtin printf '\036\037%s\037ready\037\036' "$__shell_kernel_token" >&62
