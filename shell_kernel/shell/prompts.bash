# shell_kernel: notice the cell's processes that wait for input. Bash, beside the shell.
#
#   bash prompts.bash SHELL_PID STATE_DIR
#
# Runs under a pseudo-terminal of its own (its controlling terminal), which
# is the standard input of every cell: what the kernel writes to the
# terminal's other side is what the cell reads. This script reads only its
# first line, the frames' token, which the kernel writes first, before any
# cell can read the terminal: in argv, any user could read it (ps), and
# forge frames in output a cell prints.
# It writes frames (\036\037TOKEN\037KIND\037FIELD...\037\036) to the terminal:
#   tty PATH                                 once, first: the path cells open
#   reading PID READS ECHO LINES NAME PARENT MARKED KEYS
#                                            a process blocked reading the terminal
#   done PID READS                           that read is over (answered, timed out, gone)
#   looked                                   after each look at a running cell's processes:
#                                            the kernel holds a partial line (a prompt's text
#                                            perhaps) until two looks came after it, not a
#                                            fixed time, which a slow host outlasts
# READS (the process's count of read calls) tells one read from the next;
# ECHO is 0 when the terminal does not echo (read -s, a password prompt);
# LINES is 0 when it delivers keys, not lines (-icanon: vim, top, readline);
# KEYS, when it delivers keys and still turns Enter into a newline (icrnl):
# a read of so many keys (read -n1), not a line editor or a full-screen
# program, which turn that off to tell Enter from Ctrl-J, is how many bytes
# the read asked for (1 when its call does not say), else 0;
# MARKED is 1 when a barrier frame with the nonce read.PID.READS went on the
# shell's stdout and stderr (its descriptors 61 and 62, where the cells write)
# first: behind whatever the process printed before it read, its prompt.
#
# A process waits for input when the kernel says it is in read(2) on a
# descriptor that is this terminal, or in select(2) on descriptor 0 alone
# (bash's read -t), or, with the terminal in key mode, in poll/select/epoll
# with descriptor 0 this terminal (ssh to an interactive shell; in line mode
# that is a program merely waiting, e.g. ssh running a quiet command). Only
# the shell's process tree is looked at, and only while the shell runs a
# cell, so cells that never read cost nothing.
# Two detectors tell it, each a file put in where a line says "#include
# FILE" (see __init__.py): prompts_proc.bash with /proc (Linux), else
# prompts_portable.bash, through ps. This file holds what they share: the
# set-up, the report of a read, the discard of what no read took, the loop.
# Each detector defines shell_alive, shell_idle, in_cell, collect_tree,
# waiting, still_reading, names and barrier (see there).

#include frame.bash

shell=$1 dir=$2
umask 077  # its files in the state directory are private, like the shell's
# SIGALRM ignored. Bash before 4.4 times read -t with SIGALRM and, as the
# read ends, puts the signal's default action back before it stops its
# timer: a read that got its input with little time left (a cell's start on
# the wake FIFO, a leftover line) on a busy machine could be killed by its
# own timer, and every later prompt of the session with the watcher. Read
# -t sets its own handler while it waits; a late SIGALRM is then harmless.
builtin trap '' ALRM
tty=$(tty 2>/dev/null) || exit 0
IFS= builtin read -r token || exit 0
exec 8<&0 </dev/null 2>/dev/null  # 8: to discard what no read took (see discard)
# The askpass helper (SSH_ASKPASS, SUDO_ASKPASS, GIT_ASKPASS: see
# stdin.bash) asks its question ($1) through this terminal, which it finds
# in $dir/tty (git gives it no standard input). Its name is what the kernel
# knows it by; echo off marks the question a password, except ssh's yes/no.
if [[ -n $dir ]]; then
  builtin printf '%s\n' "$tty" > "$dir/tty"
  builtin printf '%s\n' '#!/bin/sh' \
    '# shell_kernel: ask the notebook (see prompts.bash).' \
    'IFS= read -r tty < "${0%/*}/tty" && exec 0<"$tty" || exit 1' \
    'case $1 in' \
    "  *'(yes/no'*) ;;" \
    "  *) stty -echo 2>/dev/null; trap 'stty echo 2>/dev/null' EXIT ;;" \
    'esac' \
    "printf '%s' \"\$1\" >&2" \
    'IFS= read -r answer || exit 1' \
    "printf '%s\\n' \"\$answer\"" > "$dir/sk-askpass.$$" \
    && chmod 700 "$dir/sk-askpass.$$" && mv -f "$dir/sk-askpass.$$" "$dir/sk-askpass"
fi
__shell_kernel_frame -l "$token" tty "$tty"
# Without /proc (the BSDs, macOS; SHELL_KERNEL_NO_PROC on Linux): ps (see
# prompts_portable.bash).
portable=
if [[ -n ${SHELL_KERNEL_NO_PROC-} || ! -r /proc/$shell/syscall ]]; then portable=yes; fi

# A pause without a fork: a read that times out on a FIFO, $dir/wake, where
# the shell writes a line as each cell starts (cells.bash): between cells
# the watcher waits there up to idle_wait seconds (then it looks whether
# the shell still lives), not looking five times a second at a shell that
# waits for commands. A new watcher (after a reconnect) puts a FIFO of its
# own in the old one's place.
# Bash 3.2 takes whole seconds only: a sleep there (a fork per pause), and
# a look every 0.2 s between cells, as nothing wakes a sleep.
pause() { builtin read -r -t "$1" -u 9; }
idle_wait=5
if (( BASH_VERSINFO[0] < 4 )) || ! { [[ -n $dir ]] && mkfifo -m 600 "$dir/wake.$$" \
      && exec 9<>"$dir/wake.$$" && mv -f "$dir/wake.$$" "$dir/wake"; }; then
  pause() { sleep "$1"; }
  idle_wait=0.2
  rm -f "$dir/wake.$$" 2>/dev/null
fi

# What earlier cells left running, as " pid pid ... " in $left: the shell's
# children when the last cell ended (the post hook, in cells.bash, writes
# them to $dir/jobs), as reap.sh takes them. Their trees are not the
# running cell's: a background job, or the program of an interrupted cell
# that bash 3.2 (under load) no longer waited for (vim, ssh: it reads the
# terminal until its SIGTERM) and which would otherwise be taken for the
# next cell's, and stop it.
left_running() {
  local line
  left=" "
  [[ -n $dir ]] || builtin return 0
  { while builtin read -r line; do left+="$line "; done < "$dir/jobs"; } 2>/dev/null
}

ended_at_report=  # see report

# Says that PID waits in its read number READS of ASKED bytes: with its
# name, its parent's name and the terminal's modes (a fork for stty, once
# per read). With KEYS_ONLY, only if the terminal is in key mode (else
# returns 2). Returns 3, saying nothing, when PID is gone by the time its
# name is read: its read is over, and the modes were perhaps another's.
report() {
  local pid=$1 reads_done=$2 asked=$3 keys_only=$4 name= parent= echo=1 lines=1 keys=0 modes marked fd
  # The last cell that ended (the post hook, in cells.bash, writes it first
  # in $dir/status): this read's cell is the one after it (see discard).
  ended_at_report=
  if [[ -n $dir ]]; then { builtin read -r ended_at_report < "$dir/status"; } 2>/dev/null; fi
  modes=" $(stty -a < "$tty") "
  case $modes in *[[:space:]]-echo[[:space:]]*) echo=0 ;; esac
  case $modes in *[[:space:]]-icanon[[:space:]]*) lines=0 keys=$asked ;; esac
  case $modes in *[[:space:]]-icrnl[[:space:]]*) keys=0 ;; esac
  if [[ -n $keys_only && $lines == 1 ]]; then builtin return 2; fi
  names "$pid"
  if [[ -z $name ]]; then builtin return 3; fi
  marked=1
  for fd in 61 62; do
    barrier "$fd" "read.$pid.$reads_done"
    case $? in
      0) ;;
      1) marked=0 ;;
      *) marked=0; break ;;
    esac
  done
  __shell_kernel_frame -l "$token" reading "$pid" "$reads_done" "$echo" "$lines" "$name" \
    "$parent" "$marked" "$keys"
}

# Once a process that read is gone (its read over, the terminal no longer
# its input) and no read waits, what the terminal still holds was typed for
# it and not read (the rest of a line after head -c1): it goes, lest the
# next read take it. The kernel answers reported reads only, so nothing here
# is meant for a read to come; and a process still there may yet be taking
# its answer (bash's read takes a byte per call). Whole lines only, which
# needs no change of the terminal's modes (a cell's program may be setting
# them). Bash 3.2 can neither ask whether input waits (read -t 0) nor wait
# less than a second: there a line gets a second to come, which the watcher
# spends waiting (a read reported meanwhile waits for that).
discard() {
  local line
  if [[ -n $dir ]]; then
    # A cell that ended since the read was reported leaves what it did not
    # read to the kernel, which has the shell discard it before the next
    # cell (__shell_kernel_reset_stdin): waiting here for a line (a second
    # on bash 3.2) would only delay the next cell's first prompt, whose text
    # would then have gone out as output.
    local ended=
    { builtin read -r ended < "$dir/status"; } 2>/dev/null
    [[ $ended == "$ended_at_report" ]] || builtin return 0
  fi
  if (( BASH_VERSINFO[0] < 4 )); then
    while IFS= builtin read -r -t 1 -u 8 line; do :; done
    builtin return 0
  fi
  while builtin read -r -t 0 -u 8; do
    IFS= builtin read -r -t 0.01 -u 8 line || builtin return 0
  done
}

if [[ -n $portable ]]; then
#include prompts_portable.bash
else
#include prompts_proc.bash
fi

reported=()  # "pid:reads" of the reads reported and not yet over
waiters=" "  # "pid:reads" of processes found merely waiting (line mode), not reported
readers=" "  # pids whose reported reads are over, until they stop reading (see discard)
while shell_alive; do
  still=()
  # Without /proc a wait does not change while it waits: look again each time.
  if [[ -n $portable ]]; then waiters=" "; fi
  looked=
  if ! shell_idle && in_cell; then
    collect_tree
    if [[ -z $looked ]]; then
      # Not looked at: the reads reported stand as they were while their
      # processes read.
      for key in "${reported[@]}"; do
        if still_reading "${key%:*}"; then still+=("$key"); fi
      done
    fi
    for pid in $tree; do
      waiting "$pid" || continue
      if [[ $waiters == *" $pid:$reads_done "* ]]; then continue; fi
      if [[ " ${reported[*]} " != *" $pid:$reads_done "* ]]; then
        report "$pid" "$reads_done" "$asked" "$keys_only"
        case $? in
          0) ;;
          2) waiters+="$pid:$reads_done "; continue ;;
          3) continue ;;
          *) exit 0 ;;  # the terminal hung up
        esac
      fi
      still+=("$pid:$reads_done")
    done
  else
    waiters=" " readers=" "  # between cells the kernel resets the terminal
  fi
  for key in "${reported[@]}"; do
    if [[ " ${still[*]} " != *" $key "* ]]; then
      __shell_kernel_frame -l "$token" done "${key%:*}" "${key#*:}" || exit 0
      if [[ $readers != *" ${key%:*} "* ]]; then readers+="${key%:*} "; fi
    fi
  done
  reported=("${still[@]}")
  if [[ -n $looked ]]; then __shell_kernel_frame -l "$token" looked || exit 0; fi
  # A process whose read is over may live on a while (exiting, or busy
  # after its read): what it left goes once it stops reading the terminal.
  if (( ! ${#reported[@]} )) && [[ $readers != " " ]]; then
    over= reading=" "
    for pid in $readers; do
      if still_reading "$pid"; then reading+="$pid "; else over=yes; fi
    done
    readers=$reading
    if [[ -n $over ]]; then discard; fi
  fi
  if [[ -n $portable ]]; then
    if (( ${#reported[@]} )); then pause 0.1; elif ! shell_idle; then pause 0.15; else pause "$idle_wait"; fi
  elif (( ${#reported[@]} )) || ! shell_idle; then pause 0.05; else pause "$idle_wait"; fi
done
