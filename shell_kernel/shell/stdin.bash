# shell_kernel: the cells' standard input (the prompt terminal, on
# descriptor 60), and the askpass helper that sudo, ssh and git ask through,
# included into session.bash.

# Point descriptor 60, which cells read, at the prompt terminal (path $1,
# see prompts.bash), or at /dev/null when there is none or it cannot be
# opened. Opened here once, not by each cell's redirection, which would fail,
# and end the shell under set -e, once the terminal went away with a
# connection. Only a plain `exec` keeps its redirections, so a user's
# function named exec is set aside meanwhile. Closed first: bash 3.2 undoes
# an `exec 60<` inside a redirected group when 60 was open already, and fd 60
# would stay on a lost connection's terminal, where no read is seen.
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
  if (( BASH_VERSINFO[0] > 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] >= 4) )); then
    while IFS= builtin read -r -s -d '' -n 1 -t 0.01 -u 60 typed 2>/dev/null; do :; done
  elif (( BASH_VERSINFO[0] == 4 )); then
    # Bash 4.0-4.3's read -t can be killed by its own timer as it ends (see
    # prompts.bash), this shell with it: the reads go in a subshell that
    # ignores SIGALRM, not in the shell, whose traps are the user's.
    ( builtin trap '' ALRM
      while IFS= builtin read -r -s -d '' -n 1 -t 0.01 -u 60 typed 2>/dev/null; do :; done )
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
