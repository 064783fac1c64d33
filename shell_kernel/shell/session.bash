# shell_kernel: set up a persistent bash as a kernel session.
#
# Runs once, after the user's rc files, inside the user's interactive bash.
# The kernel sends it prefixed with `__shell_kernel_token=...`, as lines that
# bash reads one top-level command at a time. Every command is spelled so
# that user redefinitions (echo, printf, cd, command, ...) and shell options
# (set -u/-e/-f/-x, IFS, noclobber, failglob) cannot change it.
# (`builtin local` is not a declaration command: its values are quoted.)
#
# Channels: the kernel's stdout/stderr streams are saved on fds 61/62, and
# the shell's own fds 1/2 go to /dev/null, so prompts, job notices and rc
# noise never reach a cell. Each cell runs as
#     __shell_kernel_resume SEQ ''; builtin eval -- $'<cell>' </dev/null >&61 2>&62
#     __shell_kernel_rc=$? ...; __shell_kernel_post <seq>
# and the post hook writes the status file and an end frame on both streams.
# Frames start with \036\037 + a per-session token, bytes that `set`,
# `declare -p` and `env` never print raw, so no state dump can fake one.
#
# This file holds the setup (the state directory, the umask, shell.start,
# the environment cells run in) and, last, the ready frame. Each other job
# is a file of its own, put in where a line says "#include FILE" (see
# __init__.py): frame.bash (how a frame is written), history.bash (the
# cells' history, fc), cells.bash (the start and the end of a cell),
# failures.bash (which command failed), commands.bash (display, clear,
# exit...), queries.bash (completion and the kernel's other questions),
# stdin.bash (the cells' input, askpass), close.bash (the session's end),
# where.bash (where it runs, for a notebook job's record).
exec 61>&1 62>&2 1>/dev/null 2>/dev/null
# The token authenticates the frames: never in a command's environment (an
# rc file's `set -a` would export it), where `env` or `ps e` in a cell shows it.
builtin export -n __shell_kernel_token

#include frame.bash

__shell_kernel_pid=$$
# /proc where there is one, unless SHELL_KERNEL_NO_PROC says to do as on a
# host without it (as shell/pids.sh does).
__shell_kernel_proc=/proc/$$
if [[ -n ${SHELL_KERNEL_NO_PROC-} ]]; then __shell_kernel_proc=/nonexistent; fi
# What this script creates is private: umask 077 until its end, where the
# user's comes back (read from /proc where there is one: no fork).
__shell_kernel_umask=
if [[ -r $__shell_kernel_proc/status ]]; then
  while IFS=$': \t' builtin read -r __shell_kernel_key __shell_kernel_value; do
    if [[ $__shell_kernel_key == Umask ]]; then __shell_kernel_umask=$__shell_kernel_value; break; fi
  done < "$__shell_kernel_proc/status"
  builtin unset -v __shell_kernel_key __shell_kernel_value
fi
if [[ -z $__shell_kernel_umask ]]; then __shell_kernel_umask=$(builtin umask); fi
builtin umask 077
# A durable session's launcher made the directory already (and set it).
if [[ -z ${__shell_kernel_dir-} ]]; then
  __shell_kernel_dir=$(builtin exec mktemp -d "${TMPDIR:-/tmp}/shell_kernel.XXXXXXXXXX" 2>/dev/null) \
    || { __shell_kernel_dir=${TMPDIR:-/tmp}/shell_kernel.$$.$RANDOM$RANDOM$RANDOM \
         && builtin command mkdir -m 700 -- "$__shell_kernel_dir"; } \
    || __shell_kernel_dir=
fi
if [[ -n $__shell_kernel_dir ]]; then
  { builtin : >| "$__shell_kernel_dir/status"; } 2>/dev/null
  # This shell's pid and when it started (field 22 of its stat line, after
  # a name that may hold anything), for reap.sh: once the shell is gone, its
  # pid may name another process (a host that rebooted), not to be touched.
  __shell_kernel_value=
  { IFS= builtin read -r -d '' __shell_kernel_value < "$__shell_kernel_proc/stat"; } 2>/dev/null
  if [[ -n $__shell_kernel_value ]]; then
    # Field 22 is the 20th after the name: the shortest prefix with 19
    # spaces taken off (a here-string to `read -a` is a pipe on bash 5.1+,
    # read a byte per system call).
    __shell_kernel_value=${__shell_kernel_value##*) }
    __shell_kernel_value=${__shell_kernel_value#* * * * * * * * * * * * * * * * * * * }
    { builtin printf '%s %s\n' "$$" "${__shell_kernel_value%% *}" >| "$__shell_kernel_dir/shell.start"; } 2>/dev/null
    builtin unset -v __shell_kernel_value
  else
    # No /proc: the group and lstart, comma-separated, as shell/pids.sh tells
    # them (in UTC: whatever TZ the user's rc files set).
    IFS=$' \t\n' builtin read -r -a __shell_kernel_key \
      <<< "$(TZ=UTC0 LC_ALL=C builtin command ps -o pgid= -o lstart= -p "$$" 2>/dev/null)"
    if (( ${#__shell_kernel_key[@]} == 6 )); then
      builtin printf -v __shell_kernel_value '%s,' "${__shell_kernel_key[@]}"
      { builtin printf '%s %s\n' "$$" "${__shell_kernel_value%,}" >| "$__shell_kernel_dir/shell.start"; } 2>/dev/null
    fi
    builtin unset -v __shell_kernel_key __shell_kernel_value
  fi
fi

# Whether a builtin prints anything is read through the status file (empty
# until the first cell ends) where there is a state directory, not by $(...):
# a session's start forks nothing it can avoid.
__shell_kernel_scratch=${__shell_kernel_dir:+$__shell_kernel_dir/status}

# Where the prompt watcher has no /proc to see the shell wait for commands
# (prompts.bash), each cell's sequence number goes to $dir/cell as it starts.
__shell_kernel_cells=
if [[ -n $__shell_kernel_dir && ! -r $__shell_kernel_proc/syscall ]]; then
  __shell_kernel_cells=$__shell_kernel_dir/cell
fi

# The prompt machinery is useless without a terminal and would only cost
# time (a PS1 with $(git ...) forks twice per cell).
PS1= PS2= PS0= PS4='+ '
builtin unset -v PROMPT_COMMAND MAILCHECK HISTFILE
builtin set +o history +o monitor
builtin shopt -s huponexit 2>/dev/null

# --no-completion started bash with programmable completion off, so that
# bash-completion's login hook skipped loading it (bash_argv). Cells get the
# options they would have had: progcomp on, and where that hook would have
# loaded bash-completion (its guard: bash 4.2 or later), what it sets. (A
# startup file that turned progcomp off itself, where no bash-completion
# was loaded, reads the same: progcomp comes back on.)
if ! builtin shopt -q progcomp && [[ -z ${BASH_COMPLETION_VERSINFO-} ]]; then
  builtin shopt -s progcomp
  if [[ -r /etc/profile.d/bash_completion.sh && -r /usr/share/bash-completion/bash_completion ]] \
      && (( BASH_VERSINFO[0] > 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] >= 2) )); then
    builtin shopt -s extglob
    builtin shopt -u hostcomplete
  fi
fi

#include history.bash

# A local shell keeps the virtualenv and conda environment that were active
# where Jupyter started (the kernel passes them as __shell_kernel_launch_*),
# first on PATH and named by VIRTUAL_ENV / CONDA_PREFIX, after whatever the
# startup files did to PATH. The virtualenv goes first, as when one made
# from a conda Python is activated.
__shell_kernel_first_on_path() {
  [[ -d $1/bin ]] || builtin return 0
  PATH=:${PATH-}:
  PATH=${PATH//:"$1/bin":/:}
  PATH=$1/bin${PATH%:}
}
if [[ -n ${__shell_kernel_launch_CONDA_PREFIX-} ]]; then
  __shell_kernel_first_on_path "$__shell_kernel_launch_CONDA_PREFIX"
  builtin export CONDA_PREFIX=$__shell_kernel_launch_CONDA_PREFIX
  if [[ -n ${__shell_kernel_launch_CONDA_DEFAULT_ENV-} ]]; then
    builtin export CONDA_DEFAULT_ENV=$__shell_kernel_launch_CONDA_DEFAULT_ENV
  fi
fi
if [[ -n ${__shell_kernel_launch_VIRTUAL_ENV-} ]]; then
  __shell_kernel_first_on_path "$__shell_kernel_launch_VIRTUAL_ENV"
  builtin export VIRTUAL_ENV=$__shell_kernel_launch_VIRTUAL_ENV
fi
builtin unset -v __shell_kernel_launch_VIRTUAL_ENV __shell_kernel_launch_CONDA_PREFIX \
  __shell_kernel_launch_CONDA_DEFAULT_ENV
builtin unset -f __shell_kernel_first_on_path

# Programs must never wait for a terminal: no pagers, unbuffered Python.
builtin export PAGER=cat GIT_PAGER=cat MANPAGER=cat SYSTEMD_PAGER= \
  PYTHONUNBUFFERED=1 TERM=dumb

#include cells.bash

#include failures.bash
builtin unset -v __shell_kernel_scratch  # (read through by history.bash and failures.bash)

#include commands.bash

#include queries.bash

#include stdin.bash

#include close.bash

#include where.bash

# Owned by this user, not a symlink, writable by nobody else.
__shell_kernel_private() {
  builtin local mode
  [[ -O $1 && ! -L $1 ]] || builtin return 1
  mode=$(builtin command ls -ld -- "$1" 2>/dev/null) || builtin return 1
  [[ ${mode:5:1} != w && ${mode:8:1} != w ]]
}

# A shell lost with its connection (ephemeral SSH) is followed by one that
# takes over its exported variables and working directory, from the old
# state directory; only if that directory and its exports file are the
# user's own and writable by nobody else: after a /tmp cleaner, another user
# may have made that path, and sourcing their file would run their code.
__shell_kernel_restored=
if [[ -n ${__shell_kernel_restore_dir-} ]]; then
  if __shell_kernel_private "$__shell_kernel_restore_dir" \
      && { [[ ! -e $__shell_kernel_restore_dir/exports ]] \
           || __shell_kernel_private "$__shell_kernel_restore_dir/exports"; }; then
    if [[ -r $__shell_kernel_restore_dir/exports ]]; then
      builtin source "$__shell_kernel_restore_dir/exports"
    fi
    __shell_kernel_restored=yes
  else
    __shell_kernel_restored=refused
  fi
  if [[ -n ${__shell_kernel_restore_cwd-} ]]; then
    builtin cd -- "$__shell_kernel_restore_cwd" 2>/dev/null
  fi
  builtin unset -v __shell_kernel_restore_dir __shell_kernel_restore_cwd
fi

# What a kernel attaching to this shell later needs (a named session): the
# token of its frames, its pid and bash version.
__shell_kernel_named=
if [[ -n $__shell_kernel_dir && -e $__shell_kernel_dir/owner ]]; then
  __shell_kernel_named=yes
  { builtin printf '%s\n%s\n%s\n' "$__shell_kernel_token" "$$" "$BASH_VERSION" \
      >| "$__shell_kernel_dir/shell"; } 2>/dev/null || builtin true
fi

# --tty (see tty.bash): the cells' stdout and stderr become terminals.
if [[ -n ${__shell_kernel_tty-} ]]; then __shell_kernel_open_ttys; fi
builtin umask "$__shell_kernel_umask"
builtin unset -v __shell_kernel_umask
# A notebook job's session (__shell_kernel_announce_where) says where it runs
# in its ready frame: one round trip less than asking with a first cell.
if [[ -n ${__shell_kernel_announce_where-} ]]; then
  __shell_kernel_where
  __shell_kernel_frame "$__shell_kernel_token" ready "$$" "$BASH_VERSION" "$__shell_kernel_dir" \
    "$__shell_kernel_restored" "$__shell_kernel_where_user" "$__shell_kernel_where_host" \
    "$__shell_kernel_where_os" >&61
  builtin unset -v __shell_kernel_announce_where __shell_kernel_where_user \
    __shell_kernel_where_host __shell_kernel_where_os
else
  __shell_kernel_frame "$__shell_kernel_token" ready "$$" "$BASH_VERSION" "$__shell_kernel_dir" \
    "$__shell_kernel_restored" >&61
fi
__shell_kernel_frame "$__shell_kernel_token" ready >&62
