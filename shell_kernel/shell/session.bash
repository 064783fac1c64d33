# shell_kernel: set up a persistent bash as a kernel session.
#
# Runs once, after the user's rc files, inside the user's interactive bash.
# The kernel sends it prefixed with `__shell_kernel_token=...`. Every command
# is spelled so that user redefinitions (echo, printf, cd, command, ...) and
# shell options (set -u/-e/-f/-x, IFS, noclobber, failglob) cannot change it.
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

exec 61>&1 62>&2 1>/dev/null 2>/dev/null
# The token authenticates the frames: never in a command's environment (an
# rc file's `set -a` exported it), where `env` or `ps e` in a cell shows it.
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
    IFS=$' \n' builtin read -r -d '' -a __shell_kernel_key <<< "${__shell_kernel_value##*) }"
    { builtin printf '%s %s\n' "$$" "${__shell_kernel_key[19]}" >| "$__shell_kernel_dir/shell.start"; } 2>/dev/null
    builtin unset -v __shell_kernel_key __shell_kernel_value
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
# The history holds the notebook's cells, one entry per cell, added by the
# post hook when the cell ends (with history off, the kernel's own lines are
# never recorded). What bash loaded from ~/.bash_history is dropped: a
# notebook's output is often shared, and the file is not written back.
builtin history -c
# `history -s` with the user's HISTIGNORE and HISTCONTROL set aside: $1 is
# HISTIGNORE meanwhile (`*`: nothing is added), $2 the line. Status 1, and
# nothing done, when either is readonly (tried in a subshell: assigning to a
# readonly variable abandons the whole command line, the post hook's too).
__shell_kernel_history_push() {
  builtin local ignore="${HISTIGNORE-}" control="${HISTCONTROL-}" had="${HISTIGNORE+i}${HISTCONTROL+c}"
  builtin local flags="$-" status=1
  ( HISTIGNORE= && HISTCONTROL= ) 2>/dev/null || builtin return 1
  builtin set +a  # (allexport would export them)
  HISTIGNORE=$1 HISTCONTROL=
  builtin history -s -- "$2" && status=0
  if [[ $had == *i* ]]; then HISTIGNORE=$ignore; else builtin unset -v HISTIGNORE; fi
  if [[ $had == *c* ]]; then HISTCONTROL=$control; else builtin unset -v HISTCONTROL; fi
  if [[ $flags == *a* ]]; then builtin set -a; fi
  builtin return "$status"
}
# Bash <= 4.2: `history -s` first deletes the last entry (taken for the line
# that called it, recorded while history was on) instead of adding, and with
# the history empty it never adds at all. One entry read from a file is what
# an ignored `history -s` deletes then: from there on, as after every
# `history -s`, the next one adds without deleting first (it deletes only
# while the last line was the shell's own, not pushed). Found by a probe,
# not by version; not `#`, which the file's reader takes for a time stamp.
builtin history -s -- :
__shell_kernel_value=
if [[ -n $__shell_kernel_scratch ]]; then
  builtin history >| "$__shell_kernel_scratch"
  [[ -s $__shell_kernel_scratch ]] || __shell_kernel_value=none
  builtin : >| "$__shell_kernel_scratch"
fi
if [[ $__shell_kernel_value == none ]]; then
  { builtin printf ':\n' >| "$__shell_kernel_dir/history"
    builtin history -r "$__shell_kernel_dir/history"
    builtin command rm -f -- "$__shell_kernel_dir/history"; } 2>/dev/null
  __shell_kernel_history_push '*' : || builtin true  # (readonly: the first cell's entry replaces it)
else
  builtin history -c
fi

# The newest history entry: its number in __shell_kernel_hist_n (0: none),
# its text in __shell_kernel_hist_text. A fork: for cells that run fc only.
__shell_kernel_newest() {
  builtin local line
  line=$(builtin unset -v HISTTIMEFORMAT; builtin history 1)
  line=${line#"${line%%[! ]*}"}
  __shell_kernel_hist_n=${line%%[!0-9]*}
  line=${line#"$__shell_kernel_hist_n"}
  __shell_kernel_hist_text=${line#[* ] }
  if [[ -z $__shell_kernel_hist_n ]]; then __shell_kernel_hist_n=0; fi
}

# fc and the cells' history (the kernel names a cell that runs fc in its
# resume call, with its text). Bash 3.2's fc takes the newest entry for the
# fc command itself, as a terminal has added it by then (found by a probe,
# in a subshell: the list is untouched): there that cell's text is added
# before it runs, so that `fc -l` lists every cell before it and `fc -s`
# re-runs the last, as on 5.2.
# Probed at the first such cell (a subshell: a fork no other cell pays).
__shell_kernel_fc_skips=
__shell_kernel_fc= __shell_kernel_fc_text= __shell_kernel_fc_standin=
__shell_kernel_fc_begin() {
  if [[ -z $__shell_kernel_fc_skips ]]; then
    __shell_kernel_fc_skips=no
    if [[ $(builtin unset -v HISTIGNORE HISTCONTROL; builtin history -s -- ': 1'
            builtin history -s -- ': 2'; builtin fc -ln -1 2>&1) == *': 1' ]]; then
      __shell_kernel_fc_skips=yes
    fi
  fi
  __shell_kernel_fc=yes __shell_kernel_fc_text=$1 __shell_kernel_fc_standin=
  if [[ $__shell_kernel_fc_skips == yes ]] && __shell_kernel_history_push '' "$1"; then
    __shell_kernel_newest
    if [[ $__shell_kernel_hist_text == "$1" ]]; then __shell_kernel_fc_standin=$__shell_kernel_hist_n; fi
  fi
}
# After such a cell, before its own entry is added. Where the cell's text
# was added first (3.2) and is still the newest entry, it goes (a re-run
# adds none; another cell's entry is added as usual). Where fc -s replaced
# it with what it re-ran, the cell before goes too: bash 5.2's `fc -s`
# replaces the newest entry, which there is the last cell. Then, on bash
# <= 4.2, the command that fc -s re-ran was added as a line of the shell's
# own, which the next `history -s` deletes first: an ignored push deletes
# it now (and only then: a pushed line is never deleted), and it is pushed
# again.
__shell_kernel_fc_end() {
  builtin local n text
  __shell_kernel_fc=
  if [[ -n $__shell_kernel_fc_standin ]]; then
    __shell_kernel_newest
    if (( __shell_kernel_hist_n == __shell_kernel_fc_standin )); then
      if [[ $__shell_kernel_hist_text == "$__shell_kernel_fc_text" ]]; then
        builtin history -d "$__shell_kernel_hist_n" 2>/dev/null || builtin true
        builtin return 0
      fi
      builtin history -d "$(( __shell_kernel_hist_n - 1 ))" 2>/dev/null || builtin true
    fi
  fi
  __shell_kernel_newest
  n=$__shell_kernel_hist_n text=$__shell_kernel_hist_text
  if (( n == 0 )) || ! __shell_kernel_history_push '*' :; then builtin return 0; fi
  __shell_kernel_newest
  if (( __shell_kernel_hist_n < n )); then builtin history -s -- "$text" || builtin true; fi
}
builtin shopt -s huponexit 2>/dev/null

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

# A state file's new text: $1 the file, $2 the text, $3 the name of the
# variable that keeps the length of what this shell wrote there last.
# Truncating a file makes ext4 flush it to disk when it is closed
# (auto_da_alloc): milliseconds on a busy disk, twice per cell. So a text no
# shorter than the last one overwrites the file in place (one write, as the
# truncating one was), and only a shorter one truncates it.
__shell_kernel_put() {
  builtin local LC_ALL=C __shell_kernel_put_length  # bytes, not characters
  __shell_kernel_put_length=${#2}
  if (( __shell_kernel_put_length >= ${!3:-0} )); then
    builtin printf '%s' "$2" 1<> "$1"
  else
    builtin printf '%s' "$2" >| "$1"
  fi
  builtin printf -v "$3" %s "$__shell_kernel_put_length"
}

# The shell's children, as pids in $__shell_kernel_child_pids, one line. At
# the end of a cell no cell runs, so they are all background jobs: every
# process of a pipeline, disowned and nohup'd jobs too (`jobs -p` lists
# neither). reap.sh spares their trees when it interrupts a later cell or
# query. Linux lists them without a fork.
__shell_kernel_children() {
  builtin local self pid ppid list
  __shell_kernel_child_pids=
  if [[ -r $__shell_kernel_proc/task/$$/children ]]; then
    IFS= builtin read -r __shell_kernel_child_pids < "$__shell_kernel_proc/task/$$/children"
    builtin return 0
  fi
  # ps lists itself as a child: it runs as the command substitution, whose
  # pid comes first (said by the sh it becomes first: bash 3.2 has no $BASHPID).
  list=$(builtin exec /bin/sh -c 'echo "$$"; exec ps -A -o pid= -o ppid= 2>/dev/null')
  { IFS= builtin read -r self
    while IFS=$' \t' builtin read -r pid ppid; do
      if [[ $ppid == "$$" && $pid != "$self" ]]; then
        __shell_kernel_child_pids+="$pid "
      fi
    done; } <<< "$list"
}
# $dir/jobs: the shell's children now, for reap.sh.
__shell_kernel_record_jobs() {
  __shell_kernel_children
  __shell_kernel_put "$__shell_kernel_dir/jobs" "$__shell_kernel_child_pids"$'\n' \
    __shell_kernel_jobs_length
}
# Jobs that the startup files left running are background jobs too.
__shell_kernel_jobs_length= __shell_kernel_status_length= __shell_kernel_cell_length=
if [[ -n $__shell_kernel_dir ]]; then
  { __shell_kernel_record_jobs; } 2>/dev/null
fi

# End of a cell: record the status, then frame the end on both streams.
# The kernel sends
#     __shell_kernel_rc=$? __shell_kernel_flags=$-; builtin set +T; __shell_kernel_post <seq>
# so that a user's DEBUG trap under `set -T` (which could `return` from this
# function) is not inherited; -T is restored on the way out.
# The cell's line ends with `__shell_kernel_whole=$?`: when that did not run,
# the line was abandoned (SIGINT, `exit`, an expansion error), and $? is
# what abandoning it left: 130 after SIGINT on bash 5, 128 on 4.2, 1 on
# 3.2, as after an error. The end frame says so; the kernel, which knows
# whether it interrupted the cell, reports 130 then (see pump.py), and its
# repeat of this line after the interrupt (status 130) makes it $? too.
# The kernel sends the line again after an interrupt, in case its SIGINT cut
# the first short: the cell counts as done once all its steps ran (each may
# run twice), and a repeat after that only repeats the frame (for the last
# cell; none for an earlier one), leaving $? as that cell left it. The
# status file comes first: once it names the cell, reap.sh signals nothing
# for it (see its cell_running).
__shell_kernel_post() {
  builtin local seq="$1" status="$__shell_kernel_rc" abandoned=1
  __shell_kernel_running=  # see the trap on URG
  if [[ -n ${__shell_kernel_tty-} ]]; then __shell_kernel_check_ttys; fi  # see tty.bash
  if [[ -n ${__shell_kernel_whole-} ]]; then
    status=$__shell_kernel_whole abandoned=
    __shell_kernel_rc=$status  # what the next cell sees as $?
    __shell_kernel_whole=
  fi
  if [[ -n ${__shell_kernel_exit-} ]]; then
    status=$__shell_kernel_exit abandoned=
    __shell_kernel_rc=$status
    builtin unset -v __shell_kernel_exit
  fi
  if (( seq > ${__shell_kernel_done:-0} )); then
    if [[ -n ${__shell_kernel_dir-} ]]; then
      { __shell_kernel_put "$__shell_kernel_dir/status" "$seq"$'\n'"$status"$'\n'"${PWD-}" \
          __shell_kernel_status_length; } 2>/dev/null || builtin true
    fi
    __shell_kernel_why_line= __shell_kernel_why_command=
    if (( status )); then __shell_kernel_failure "$status"; fi
    __shell_kernel_failed=()
    if [[ -n $__shell_kernel_fc ]]; then __shell_kernel_fc_end; fi
    # $2, when given: the cell's history entry.
    if (( $# > 1 && seq != ${__shell_kernel_recorded:-0} )); then
      builtin history -s -- "$2"
      __shell_kernel_recorded=$seq
    fi
    if [[ -n ${__shell_kernel_dir-} ]]; then
      { __shell_kernel_record_jobs
        if [[ -n ${__shell_kernel_snapshot-} ]]; then
          builtin export -p >| "$__shell_kernel_dir/exports"
        fi; } 2>/dev/null || builtin true
    fi
    __shell_kernel_done=$seq __shell_kernel_done_status=$status
    __shell_kernel_done_abandoned=$abandoned
  else
    if (( seq == __shell_kernel_done && __shell_kernel_rc == 130 )) \
        && [[ -n $__shell_kernel_done_abandoned && $__shell_kernel_done_status != 130 ]]; then
      __shell_kernel_done_status=130  # the repeat after an interrupt: see above
      if [[ -n ${__shell_kernel_dir-} ]]; then
        { __shell_kernel_put "$__shell_kernel_dir/status" "$seq"$'\n'130$'\n'"${PWD-}" \
            __shell_kernel_status_length; } 2>/dev/null || builtin true
      fi
    fi
    status=$__shell_kernel_done_status
    __shell_kernel_rc=$status
  fi
  if (( seq == __shell_kernel_done )); then  # else: a late repeat for a cell long over
    __shell_kernel_frame "$__shell_kernel_token" end "$seq" "$status" "${PWD-}" \
      "$__shell_kernel_why_line" "$__shell_kernel_why_command" "$__shell_kernel_done_abandoned" \
      >&61 2>/dev/null || builtin true
    __shell_kernel_frame "$__shell_kernel_token" end "$seq" >&62 2>/dev/null || builtin true
  fi
  if [[ $__shell_kernel_flags == *T* ]]; then builtin set -T; fi
}

# A cell stopped after its grace: reap.sh kills what still runs with
# SIGTERM/SIGKILL, and bash, which had the SIGINT while waiting on that
# child, takes a child dead of any other signal for one that handled SIGINT
# and runs the cell's next command. reap.sh sends SIGURG too, while it holds
# the shell stopped: a trapped signal's action runs before the next command
# starts, and there no child runs, so this SIGINT abandons the command line
# as Ctrl-C does. Only while a cell runs (from __shell_kernel_resume to
# __shell_kernel_post): bash 5.2 without line editing crashes when a trap
# that SIGINTs the shell runs while it waits for input. (SIGURG: one that
# users rarely trap, and that does nothing to a shell without this trap; a
# user's own trap on it replaces this one.)
builtin trap -- 'if [[ -n ${__shell_kernel_running-} ]]; then builtin kill -INT $$; fi' URG

# Which command set a failing cell's status, and where. The ERR trap notes
# each failure at the cell's own level (bash runs it neither inside
# functions nor in subshells, unless the user sets -E), so succeeding
# commands cost nothing; the kernel's own commands are not noted. A user's
# ERR trap replaces this one (their failing cells then give the status only).
__shell_kernel_failed=() __shell_kernel_why_line= __shell_kernel_why_command=
# A failure with stdout elsewhere than the cell's (fd 61) is the kernel's
# own: its start-of-cell line, or the eval that runs the cell, which fails
# after it (and whose BASH_COMMAND is then not always the eval).
# (One line: $LINENO in a trap counts the trap's own lines too.)
__shell_kernel_on_err='{ __shell_kernel_note=("$?" "$LINENO" "${PIPESTATUS[*]}" "$BASH_COMMAND");'
__shell_kernel_on_err+=' if [[ /dev/fd/1 -ef /dev/fd/61 ]]; then'
__shell_kernel_on_err+=' __shell_kernel_failed=("${__shell_kernel_note[@]}"); fi; } 2>/dev/null'
if [[ -n $__shell_kernel_scratch ]]; then
  builtin trap -p ERR >| "$__shell_kernel_scratch"
  [[ -s $__shell_kernel_scratch ]] && __shell_kernel_value=kept || __shell_kernel_value=
  builtin : >| "$__shell_kernel_scratch"
else
  __shell_kernel_value=$(builtin trap -p ERR)
fi
if [[ -z $__shell_kernel_value ]]; then builtin trap -- "$__shell_kernel_on_err" ERR; fi
builtin unset -v __shell_kernel_on_err __shell_kernel_value __shell_kernel_scratch

# Sets __shell_kernel_why_line and __shell_kernel_why_command for a cell
# that ended with status $1, if the last noted failure has that status: it
# is then the command that set it, except after a status that the trap does
# not see (`! cmd`, `false && x`) which happens to equal an earlier one.
# A pipeline whose last command did not set the status (pipefail) gives
# the line only (the kernel names the line's text).
# BASH_COMMAND is the command after alias expansion: an alias's text goes
# back to the name that was typed (Debian's ls='ls --color=auto': the user
# wrote `ls /x`), the longest that fits. Only the cell's command words
# (__shell_kernel_words, from the kernel) are looked up: the cost does not
# grow with the number of aliases.
__shell_kernel_failure() {
  builtin local command __shell_kernel_aliases __shell_kernel_alias __shell_kernel_value
  builtin local __shell_kernel_typed= IFS=' '
  [[ ${__shell_kernel_failed[0]-} == "$1" ]] || builtin return 0
  command=${__shell_kernel_failed[3]:0:200}
  if [[ ${__shell_kernel_failed[2]##* } != "$1" ]]; then command=; fi
  if [[ -n $command && -n ${__shell_kernel_words-} ]]; then
    # Split here, not read from a here-string (a temporary file before bash
    # 5.1). The words hold no glob or quote character (see protocol.py).
    __shell_kernel_aliases=$(builtin alias -- $__shell_kernel_words 2>/dev/null; builtin true)$'\n'
    while [[ -n $__shell_kernel_aliases ]]; do
      __shell_kernel_alias=${__shell_kernel_aliases%%$'\n'*}
      __shell_kernel_aliases=${__shell_kernel_aliases#*$'\n'}
      __shell_kernel_alias=${__shell_kernel_alias#alias }
      __shell_kernel_value=${__shell_kernel_alias#*=}
      if [[ $__shell_kernel_value != \'?*\' ]]; then builtin continue; fi
      __shell_kernel_value=${__shell_kernel_value:1:${#__shell_kernel_value}-2}
      __shell_kernel_value=${__shell_kernel_value//\'\\\'\'/\'}
      if [[ ( ${__shell_kernel_failed[3]} == "$__shell_kernel_value" \
              || ${__shell_kernel_failed[3]} == "$__shell_kernel_value "* ) \
            && ${#__shell_kernel_value} -gt ${#__shell_kernel_typed} ]]; then
        __shell_kernel_typed=$__shell_kernel_value
        command=${__shell_kernel_alias%%=*}${__shell_kernel_failed[3]:${#__shell_kernel_value}}
        command=${command:0:200}
      fi
    done
  fi
  __shell_kernel_why_line=$(( __shell_kernel_failed[1] - ${__shell_kernel_line:-0} + 1 ))
  __shell_kernel_why_command=$command  # (frame.bash escapes it)
}

# Seconds since the epoch, in $__shell_kernel_time: printf's %(%s)T, which bash 4.2 added, else date.
if (( BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 402 )); then
  __shell_kernel_now() { builtin printf -v __shell_kernel_time '%(%s)T' -1; }
else
  __shell_kernel_now() { __shell_kernel_time=$(builtin command date +%s); }
fi

# Start of a cell: give the cell the $? that the previous cell left, as
# consecutive commands in a script see it ($_ is empty: after the kernel's
# eval it would hold the previous cell's whole text). Under set -e a non-zero
# status would end the shell here, so it is 0 then (a set -e shell whose
# last command failed has normally exited already).
# $1 is the cell's sequence number: in a named session (launch.sh gave its
# directory an owner), "SEQ SECONDS" in `started` says which cell runs since
# when, for a kernel that attaches to it later. $2 "fc" and $3 the cell's
# text: a cell that runs fc (see __shell_kernel_fc_begin). The last argument
# is always ''.
__shell_kernel_resume() {
  __shell_kernel_line=${BASH_LINENO[0]}  # the eval's line: cell lines count from it
  # Bash <= 4.2 keeps the call frames that an interrupt unwound (`exit` in a
  # function), below the live ones: how many, for exit to skip.
  __shell_kernel_stale_frames=$(( ${#BASH_LINENO[@]} - 1 ))
  __shell_kernel_running=yes  # see the trap on URG
  __shell_kernel_fc=
  if [[ ${2-} == fc ]]; then __shell_kernel_fc_begin "$3"; fi
  if [[ -n $__shell_kernel_cells ]]; then
    { __shell_kernel_put "$__shell_kernel_cells" "${1-}"$'\n' __shell_kernel_cell_length; } \
      2>/dev/null || builtin true
  fi
  if [[ -n ${1-} && -n ${__shell_kernel_named-} ]]; then
    __shell_kernel_now
    { builtin printf '%s %s\n' "$1" "$__shell_kernel_time" >| "$__shell_kernel_dir/started"; } 2>/dev/null || builtin true
  fi
  if [[ -n ${__shell_kernel_notice-} ]]; then  # once, in the first cell
    builtin printf '%s\n' "$__shell_kernel_notice" >&62
    builtin unset -v __shell_kernel_notice
  fi
  if [[ ${__shell_kernel_flags-} == *e* ]]; then builtin return 0; fi
  builtin return "${__shell_kernel_rc:-0}"
}

#include queries.bash

# Hand FILE's bytes to the kernel: copied into the state directory as
# payload.PID.N, named by a frame \036\037token\037KIND\037FIELD...\037NAME\037\036
# (one short write: a background job printing at the same moment cannot mix
# into the bytes, which never travel in band); the kernel fetches the file
# and removes it.
__shell_kernel_payloads=0
# The pid of the (sub)shell that runs this, in $__shell_kernel_self: a
# display in a pipeline runs in a subshell, whose count of payloads starts
# where its parent's was. Bash 3.2 has no $BASHPID: there it is the parent
# of a sh that a command substitution becomes (a fork per call).
__shell_kernel_own_pid() {
  __shell_kernel_self=${BASHPID:-$(builtin exec /bin/sh -c 'echo "$PPID"')}
}
__shell_kernel_send_file() {
  builtin local kind="$1" file="$2" name
  builtin shift 2
  __shell_kernel_own_pid
  name=payload.$__shell_kernel_self.$(( ++__shell_kernel_payloads ))
  builtin command cp -- "$file" "$__shell_kernel_dir/$name" || builtin return 1
  __shell_kernel_frame "$__shell_kernel_token" "$kind" "$@" "$name"
}

# display [--mime TYPE] [--id NAME] [FILE]: show FILE (or standard input)
# in the notebook as an image, HTML, Markdown, JSON or text. With --id, a
# later display with the same NAME replaces this one in place. Without a
# type (from --mime or the file name), the kernel tells it from the first
# bytes. bash_kernel's form, `... | display [ID]`, works too.
display() {
  builtin local mime= id= file= size limit="${SHELL_KERNEL_DISPLAY_LIMIT:-16000000}" tmp= nocase
  while (( $# )); do
    case $1 in
      --mime) mime=${2-}; builtin shift 2 || builtin shift ;;
      --mime=*) mime=${1#--mime=}; builtin shift ;;
      --id) id=${2-}; builtin shift 2 || builtin shift ;;
      --id=*) id=${1#--id=}; builtin shift ;;
      -h|--help)
        builtin printf '%s\n' "usage: display [--mime TYPE] [--id NAME] [FILE]" \
          "Shows FILE, or standard input, in the notebook. TYPE defaults from the file name:" \
          "png jpg/jpeg gif svg html/htm md json txt, else from the first bytes" \
          "(PNG, JPEG, GIF, SVG, HTML; other UTF-8 is text)." \
          "--id NAME: a later display with the same NAME updates this one in place." \
          "As in bash_kernel, \`... | display ID\` (ID names no file) is --id ID."
        builtin return 0 ;;
      --) builtin shift; file=${1-}; break ;;
      -*) builtin printf 'display: unknown option %s (see display --help)\n' "$1" >&2; builtin return 2 ;;
      *) file=$1; builtin shift ;;
    esac
  done
  # bash_kernel's `display ID`: a word with no dot or slash that names no file.
  if [[ -n $file && -z $id && ! -e $file && $file != */* && $file != *.* ]]; then
    id=$file file=
  fi
  if [[ -z $mime ]]; then
    # In any case (nocasematch: bash 3.2 has no ${file,,}), else empty: the
    # kernel tells the type from the bytes.
    if builtin shopt -q nocasematch; then nocase=; else nocase=yes; builtin shopt -s nocasematch; fi
    case $file in
      *.png) mime=image/png ;; *.jpg|*.jpeg) mime=image/jpeg ;; *.gif) mime=image/gif ;;
      *.svg) mime=image/svg+xml ;; *.html|*.htm) mime=text/html ;; *.md) mime=text/markdown ;;
      *.json) mime=application/json ;; *.txt) mime=text/plain ;;
    esac
    if [[ -n $nocase ]]; then builtin shopt -u nocasematch; fi
  fi
  if [[ -z $file && -t 0 ]]; then
    builtin printf 'display: give a FILE, or pipe the data in (... | display)\n' >&2
    builtin return 2
  fi
  if [[ -z $file ]]; then
    __shell_kernel_own_pid
    tmp=$__shell_kernel_dir/display.$__shell_kernel_self
    builtin command cat >| "$tmp" || builtin return 1
    file=$tmp
  elif [[ ! -f $file || ! -r $file ]]; then
    builtin printf 'display: %s: no such readable file\n' "$file" >&2
    builtin return 1
  fi
  size=$(builtin command wc -c < "$file")
  if (( size > limit )); then
    builtin printf 'display: %s is %d bytes, over the %d byte limit (SHELL_KERNEL_DISPLAY_LIMIT); nothing was shown\n' \
      "${tmp:+standard input}${tmp:-$file}" "$size" "$limit" >&2
    [[ -z $tmp ]] || builtin command rm -f -- "$tmp"
    builtin return 1
  fi
  __shell_kernel_send_file display "$file" "$mime" "$id"
  [[ -z $tmp ]] || builtin command rm -f -- "$tmp"
}

# bash_kernel's names: `... | displayHTML [ID]`, `... | displayJS [ID]`, and
# the capabilities that programs written for it look for.
displayHTML() { display --mime text/html ${1:+--id "$1"}; }
displayJS() { display --mime application/javascript ${1:+--id "$1"}; }
builtin export NOTEBOOK_BASH_KERNEL_CAPABILITIES=image,html,javascript

# `clear` and `tput clear` clear the cell's output, as they clear a
# terminal: they print the sequence that the kernel turns into a
# clear_output message (TERM=dumb has no clear capability, so the programs
# themselves would print nothing and fail).
clear() { builtin printf '\033[H\033[2J'; }
tput() {
  if [[ $# == 1 && $1 == clear ]]; then clear; else builtin command tput "$@"; fi
}

# `exit N` in a cell ends that cell with status N and keeps the shell, as a
# notebook user expects. It unwinds the running cell the way Ctrl-C does (an
# interactive bash abandons the command line on SIGINT and keeps its state).
# Subshells, and shells that trap or ignore SIGINT, really exit.
exit() {
  builtin local status="$?"
  __shell_kernel_own_pid
  if [[ $__shell_kernel_self != "${__shell_kernel_pid-}" ]]; then builtin exit "$@"; fi
  if [[ -n ${1-} ]]; then
    if [[ $1 =~ ^(-?)0*([0-9]+)$ ]]; then
      status=$(( ${BASH_REMATCH[1]}${BASH_REMATCH[2]} & 255 ))
    else
      builtin printf 'bash: exit: %s: numeric argument required\n' "$1" >&2
      status=2
    fi
  fi
  __shell_kernel_exit=$status
  # The line of the cell's own command (a function calling exit is named).
  __shell_kernel_failed=("$status" "${BASH_LINENO[${#BASH_LINENO[@]}-1-${__shell_kernel_stale_frames:-0}]}" \
    "$status" "exit${1+ $1}")
  builtin kill -INT "$__shell_kernel_pid"
  builtin exit "$status"
}

# Point descriptor 60, which cells read, at the prompt terminal (path $1,
# see prompts.bash), or at /dev/null when there is none or it cannot be
# opened. Opened here once, not by each cell's redirection, which would fail,
# and end the shell under set -e, once the terminal went away with a
# connection. Only a plain `exec` keeps its redirections, so a user's
# function named exec is set aside meanwhile. Closed first: bash 3.2 undoes
# an `exec 60<` inside a redirected group when 60 was open already (fd 60
# then stayed on a lost connection's terminal, and no read was seen again).
__shell_kernel_stdin() {
  builtin local saved=
  if builtin declare -F exec >/dev/null; then
    saved=$(builtin declare -f exec)
    builtin unset -f exec
  fi
  exec 60<&-
  { exec 60<"${1:-/dev/null}"; } 2>/dev/null || exec 60</dev/null
  if [[ -n $saved ]]; then builtin eval "$saved"; fi
  __shell_kernel_modes=
  if [[ -n ${1-} ]]; then
    __shell_kernel_modes=$(builtin command stty -g <&60 2>/dev/null)
  fi
}

# A program killed while it had the terminal in key mode (ssh, vim after
# SIGKILL) cannot restore its modes: the kernel has the shell do it before
# the next cell, as a shell does for its terminal, after a cell that read it.
# What was typed for that cell and not read (the rest of a line after
# `head -c1`, of the keys after `read -n1`) is discarded, so that it never
# reaches this cell: read a key at a time, unechoed, until none is pending.
__shell_kernel_reset_stdin() {
  builtin local typed
  if [[ -n ${__shell_kernel_modes-} ]]; then
    builtin command stty "$__shell_kernel_modes" <&60 2>/dev/null
  fi
  if (( BASH_VERSINFO[0] >= 4 )); then
    while IFS= builtin read -r -s -d '' -n 1 -t 0.01 -u 60 typed 2>/dev/null; do :; done
  elif [[ -n ${__shell_kernel_modes-} ]]; then
    # Bash 3.2 takes no fraction of a second: the terminal hands what it
    # holds to cat at once (no echo, min 0 time 0), then gets its modes back.
    builtin command stty -echo -icanon min 0 time 0 <&60 2>/dev/null \
      && builtin command cat <&60 >/dev/null 2>&1
    builtin command stty "$__shell_kernel_modes" <&60 2>/dev/null
  fi
}

# Programs that want a terminal for a password or a yes/no ask the notebook
# instead, through the askpass helper that shell/prompts.bash writes (cells
# have no controlling terminal). sudo needs -A for it: the function adds it
# unless the user chose how sudo reads (-A, -S, -n); scripts, which do not
# see this function, run sudo unchanged.
if [[ -n $__shell_kernel_dir ]]; then
  builtin export SSH_ASKPASS="$__shell_kernel_dir/sk-askpass" SSH_ASKPASS_REQUIRE=force \
    SUDO_ASKPASS="$__shell_kernel_dir/sk-askpass" GIT_ASKPASS="$__shell_kernel_dir/sk-askpass"
  sudo() {
    builtin local __shell_kernel_arg
    for __shell_kernel_arg in "$@"; do
      case $__shell_kernel_arg in
        --) break ;;
        --askpass|--stdin|--non-interactive) builtin command sudo "$@"; builtin return ;;
        --*) ;;
        -*[ASn]*) builtin command sudo "$@"; builtin return ;;
        -*) ;;
        *) break ;;
      esac
    done
    builtin command sudo -A "$@"
  }
fi

# The kernel closing the session between cells. A shell that leads its own
# process group (a local shell, or an SSH session channel's: the kernel
# starts the one, sshd the other, as a session leader) ends itself and
# everything it started, with no side channel and no scan of the host's
# process table: a shell without job control never moves its jobs to other
# groups, so background, disowned, nohup'd and orphaned jobs are all in its
# group. The state directory goes first, then SIGTERM to the group and to
# each child's (an interactive bash ignores it, once a user's trap is
# reset), up to 0.5 s for the children to go, then SIGKILL, this shell
# included. $1: a nonce, sent back in a barrier frame when this shell does
# not lead its group, or has job control on (`set -m`: a job's orphans stay
# in a group of their own): the kernel's reaper, which finds the session's
# every member, does the work then.
__shell_kernel_close() {
  builtin local stat= waited=0
  builtin local -a fields
  { IFS= builtin read -r stat < "$__shell_kernel_proc/stat"; } 2>/dev/null
  IFS=' ' builtin read -r -a fields <<< "${stat##*) }"
  if [[ ${fields[2]-} != "$$" || $- == *m* ]]; then
    __shell_kernel_frame "$__shell_kernel_token" barrier "$1" >&61
    __shell_kernel_frame "$__shell_kernel_token" barrier "$1" >&62
    builtin return 0
  fi
  case $__shell_kernel_dir in
    */shell_kernel.*)
      if [[ -d $__shell_kernel_dir && ! -L $__shell_kernel_dir ]]; then
        builtin command rm -rf -- "$__shell_kernel_dir" 2>/dev/null
      fi ;;
  esac
  builtin trap - TERM
  __shell_kernel_signal_jobs TERM
  while (( waited++ < 10 )) && __shell_kernel_has_children; do
    builtin command sleep 0.05 2>/dev/null
  done
  __shell_kernel_signal_jobs KILL
}

# The shell's children, read in this shell: a command substitution would
# be a child too. (Only where /proc lists them: see __shell_kernel_close.)
__shell_kernel_has_children() {
  builtin local children=
  { IFS= builtin read -r children < "/proc/$$/task/$$/children"; } 2>/dev/null
  [[ -n ${children// } ]]
}

# Signal $1 to each child of the shell and the group it may lead, then to
# the shell's own group (last: for KILL, this shell goes with it).
__shell_kernel_signal_jobs() {
  builtin local child
  builtin local -a children
  { IFS=' ' builtin read -r -a children < "/proc/$$/task/$$/children"; } 2>/dev/null
  for child in "${children[@]}"; do
    builtin kill -"$1" -- "-$child" "$child" 2>/dev/null
  done
  builtin kill -"$1" -- "-$$" 2>/dev/null
}

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
__shell_kernel_frame "$__shell_kernel_token" ready "$$" "$BASH_VERSION" "$__shell_kernel_dir" \
  "$__shell_kernel_restored" >&61
__shell_kernel_frame "$__shell_kernel_token" ready >&62
