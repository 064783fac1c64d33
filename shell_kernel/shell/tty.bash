# shell_kernel --tty: the cells' stdout and stderr are two pseudo-terminals.
#
# Sent before session.bash (functions only), which calls
# __shell_kernel_open_ttys before its ready frame when __shell_kernel_tty is set.
#
# A terminal needs a creator on the host, and without Python there the
# portable one is util-linux `script`: it runs a command on a new pty and
# copies everything written to that pty to its own stdout. For each stream
# a `script` runs a holder on its pty with its stdout on the kernel's
# channel (fd 61 or 62: a pipe, the durable session's spool FIFO, an SSH
# channel); the shell then points 61/62 at the two terminals, so that cells,
# displays and end frames all go through them, each stream in its order.
# The holder sets the terminal up (no output processing, so LF stays LF; a
# window size), says its pid and the terminal's path through a FIFO, then waits on a
# FIFO of its own whose only writer is the shell (fd 57 or 58): when the
# shell ends (killed too), the holder and its `script` end. `script` reads
# that FIFO too: an old one that ends at end-of-file on its input also ends
# with the shell. The FIFOs are made in the shell's private state directory
# and removed once open. (Not process substitutions: bash 3.2 keeps their
# pipes open in the shell until the whole start is over, so the second
# holder would hold the first's input too. dash takes descriptors 0-9 only,
# hence 7 and 8 in the holder.)
#
# Descriptors are moved with a plain `exec`: the redirections of `builtin
# exec` do not outlast it, and bash 3.2's `command exec REDIRECTION` inside
# a function or an eval (all of this runs in both) throws away the cleanup
# of every call around it (a misspelt unwind tag, fixed by 4.2): the shell
# loses its place in its input and ends, and functions' locals outlive them.
# Bash 3.2's `exec` also leaves a descriptor above 9 that is already open as
# it was (it undoes that redirection), so 61 and 62 are closed first, in the
# same `exec` (a redirection that fails undoes them all).
# At the start no user's function named exec can be in the way (session.bash
# moves its own descriptors with `exec` before); at the end of a cell one can,
# and is set aside meanwhile, as in __shell_kernel_stdin.

__shell_kernel_tty_columns=80 __shell_kernel_tty_lines=24

__shell_kernel_open_ttys() {
  builtin local fifo="${__shell_kernel_dir-}/ttys" out= err= out_pid= err_pid=
  builtin local out_input="${__shell_kernel_dir-}/tty-stdout" err_input="${__shell_kernel_dir-}/tty-stderr"
  builtin local holder="stty -opost cols $__shell_kernel_tty_columns rows $__shell_kernel_tty_lines"
  holder+=' 2>/dev/null; echo "$$ $(tty)" >&7 7>&- && exec cat <&8 >/dev/null 7>&-'
  if [[ -z ${__shell_kernel_dir-} ]] || ! builtin type -P script >/dev/null; then
    __shell_kernel_tty_failed "util-linux 'script' is not installed on this host"
    builtin return 0
  fi
  # Opened read-write, so that the opens never block, whoever comes.
  if ! { builtin command mkfifo -m 600 -- "$fifo" "$out_input" "$err_input" \
      && exec 56<>"$fifo" 57<>"$out_input" 58<>"$err_input"; } 2>/dev/null; then
    builtin command rm -f -- "$fifo" "$out_input" "$err_input"
    __shell_kernel_tty_failed "cannot make a FIFO in $__shell_kernel_dir"
    builtin return 0
  fi
  # Not the shell's children (the subshell leaves them to init) and in a
  # session of their own: a cell's `kill 0`, an interrupt and the reaping
  # of the shell's processes at shutdown (which would wait for `script` to
  # give in to SIGTERM) leave them alone; they end with the shell.
  builtin local -a setsid; setsid=()
  if builtin type -P setsid >/dev/null; then setsid=(setsid); fi
  # util-linux `script -q -c CMD FILE`; the BSDs' and macOS's have no -c,
  # and take `script -q FILE CMD ARG...`.
  builtin local -a holding; holding=(script -q -c "$holder" /dev/null)
  if ! builtin command script -q -c true /dev/null </dev/null >/dev/null 2>&1; then
    holding=(script -q /dev/null /bin/sh -c "$holder")
  fi
  # One after the other, so that each path read is the one just asked for.
  ( exec 8<"$out_input" 7>&56 56>&- 57>&- 58>&- 60<&- 62>&-
    SHELL=/bin/sh "${setsid[@]}" "${holding[@]}" <&8 >&61 2>/dev/null 61>&- & )
  IFS=' ' builtin read -r -t 5 -u 56 out_pid out
  ( exec 8<"$err_input" 7>&56 56>&- 57>&- 58>&- 60<&- 61>&-
    SHELL=/bin/sh "${setsid[@]}" "${holding[@]}" <&8 >&62 2>/dev/null 62>&- & )
  IFS=' ' builtin read -r -t 5 -u 56 err_pid err
  builtin command rm -f -- "$fifo" "$out_input" "$err_input"
  __shell_kernel_tty_holders=("$out_pid" "$err_pid")
  exec 56<&-
  # The kernel's channels stay open on 54/55, for __shell_kernel_check_ttys.
  if [[ $out != /dev/* || $err != /dev/* ]] \
      || ! exec 54>&61 55>&62 61>&- 62>&- 61>"$out" 62>"$err"; then
    exec 57>&- 58>&- 54>&- 55>&-  # the holders end
    __shell_kernel_tty_failed "'script' gave no terminal within 5 seconds"
    builtin return 0
  fi
  builtin export TERM=xterm-256color COLUMNS=$__shell_kernel_tty_columns \
    LINES=$__shell_kernel_tty_lines
}

# At the end of each cell (from __shell_kernel_post): if a `script` or a
# holder was killed (after `pkill script`, `script` lingers but copies no
# more), what was written to its terminal is lost, and so would be every
# later cell's output and end frame: the shell goes back to the kernel's
# channels, and the cell says so. Two builtin reads per cell.
__shell_kernel_check_ttys() {
  builtin local pid stat alive=yes
  for pid in "${__shell_kernel_tty_holders[@]}"; do
    builtin kill -0 "$pid" 2>/dev/null || { alive=; break; }
    # A killed `script` leaves its holder a zombie where nothing reaps it
    # (a container's init): its state in /proc, else from ps (a fork per
    # terminal per cell, on hosts without /proc).
    stat=
    if [[ -z ${SHELL_KERNEL_NO_PROC-} && -r /proc/$pid/stat ]]; then
      IFS= builtin read -r stat < "/proc/$pid/stat" 2>/dev/null
      stat=${stat##*) } stat=${stat%% *}
    else
      stat=$(builtin command ps -o stat= -p "$pid" 2>/dev/null)
    fi
    if [[ $stat == *Z* ]]; then alive=; fi
  done
  if [[ -n $alive ]]; then builtin return 0; fi
  builtin local saved=
  if builtin declare -F exec >/dev/null; then
    saved=$(builtin declare -f exec)
    builtin unset -f exec
  fi
  exec 61>&- 62>&- 61>&54 62>&55 54>&- 55>&- 57>&- 58>&-
  if [[ -n $saved ]]; then builtin eval "$saved"; fi
  __shell_kernel_tty=
  builtin export TERM=dumb
  builtin printf '%s\n' "[shell_kernel] --tty: a terminal of this shell's output ended (its 'script' process was killed), and what this cell wrote to it since is lost. The shell now writes to pipes, as without --tty; restart the kernel to get terminals again." >&62
}

# Without terminals the cells keep the pipes (and TERM=dumb); the first
# cell says so on its stderr (see __shell_kernel_resume).
__shell_kernel_tty_failed() {
  __shell_kernel_notice="[shell_kernel] --tty: $1; this shell's output goes through pipes, as without --tty."
}
