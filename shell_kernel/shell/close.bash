# shell_kernel: the shell ending itself and everything it started, when the
# kernel closes the session, included into session.bash.

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
