# shell_kernel: the start and the end of every cell, included into
# session.bash: the hooks that the kernel's lines around a cell call, and
# the state files they keep for reap.sh, prompts.bash and a kernel that
# attaches later.

# A state file's new text: $1 the file, $2 the text, $3 the name of the
# variable that keeps the length of what this shell wrote there last.
# Truncating a file makes ext4 flush it to disk when it is closed
# (auto_da_alloc): milliseconds on a busy disk, twice per cell. So a text no
# shorter than the last one overwrites the file in place (one write, as the
# truncating one was), and only a shorter one truncates it. Lengths are of
# ASCII text, where characters are bytes: counting bytes with a local
# LC_ALL=C would cost two setlocale calls, most of a cell's hooks. A text
# with other bytes (a directory's name) truncates, and so does the next one.
__shell_kernel_put() {
  if [[ $2 == *[![:ascii:]]* ]]; then
    builtin printf '%s' "$2" >| "$1"
    builtin printf -v "$3" %s 2147483647
  elif (( ${#2} >= ${!3:-0} )); then
    builtin printf '%s' "$2" 1<> "$1"
    builtin printf -v "$3" %s "${#2}"
  else
    builtin printf '%s' "$2" >| "$1"
    builtin printf -v "$3" %s "${#2}"
  fi
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
  # Wake the prompt watcher, which waits on this FIFO between cells
  # (prompts.bash): a line, unless one waits there already, so that it never
  # fills (a watcher gone would leave this shell blocked on a full FIFO).
  # Bash 3.2 has no `read -t 0` to ask with (its watcher makes no FIFO).
  if [[ -p $__shell_kernel_dir/wake ]] && (( BASH_VERSINFO[0] >= 4 )); then
    { { builtin read -r -t 0 || builtin printf '\n' >&0; } 0<>"$__shell_kernel_dir/wake"; } \
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
