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
# that is a program merely waiting, e.g. ssh running a quiet command). Only the shell's process tree is looked at, and only
# while the shell runs a cell, so cells that never read cost nothing.
# With /proc (Linux) as above; elsewhere through ps (see "portable" below).

#include frame.bash

shell=$1 dir=$2
umask 077  # its files in the state directory are private, like the shell's
tty=$(tty 2>/dev/null) || exit 0
IFS= builtin read -r token || exit 0
exec 8<&0 </dev/null 2>/dev/null  # 8: to discard what no read took (see discard)
# The askpass helper (SSH_ASKPASS, SUDO_ASKPASS, GIT_ASKPASS: see
# session.bash) asks its question ($1) through this terminal, which it finds
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
# Without /proc (the BSDs, macOS; SHELL_KERNEL_NO_PROC on Linux): ps, see below.
portable=
if [[ -n ${SHELL_KERNEL_NO_PROC-} || ! -r /proc/$shell/syscall ]]; then portable=yes; fi

# System call numbers of read, readv, pread64; of select/pselect6 (whose
# first argument, the highest descriptor + 1, is 0x1 when only 0 is
# watched); and of poll, ppoll, epoll_wait, epoll_pwait.
case $HOSTTYPE in  # bash knows the machine: no uname
  x86_64) reads=' 0 19 17 ' selects=' 23 270 ' polls=' 7 271 232 281 ' ;;
  aarch64|arm64) reads=' 63 65 67 ' selects=' 72 ' polls=' 73 22 ' ;;
  i?86) reads=' 3 145 180 ' selects=' 142 308 ' polls=' 168 309 256 319 ' ;;
  arm*) reads=' 3 145 180 ' selects=' 142 335 ' polls=' 168 336 252 346 ' ;;
  *) reads=' 0 ' selects=' ' polls=' ' ;;
esac
readv=${reads# * }; readv=${readv%% *}  # the second: its third argument counts buffers, not bytes

# A pause without a fork: a read that times out on a FIFO nobody writes.
# Bash 3.2 takes whole seconds only: a sleep there (a fork per pause).
pause() { builtin read -r -t "$1" -u 9; }
if (( BASH_VERSINFO[0] < 4 )) \
    || ! { [[ -n $dir ]] && mkfifo -m 600 "$dir/prompts.$$" && exec 9<>"$dir/prompts.$$"; }; then
  pause() { sleep "$1"; }
fi
rm -f "$dir/prompts.$$" 2>/dev/null

# The shell is idle (between cells) when it waits for its commands: in
# read(2) on descriptor 0, or select(2) on it alone, and descriptor 0 is
# then not this terminal.
shell_idle() {
  local nr arg rest
  builtin read -r nr arg rest < "/proc/$shell/syscall" || builtin return 1
  [[ ( $reads == *" $nr "* && $arg == 0x0 ) || ( $selects == *" $nr "* && $arg == 0x1 ) ]] \
    && [[ ! /proc/$shell/fd/0 -ef $tty ]]
}

# What earlier cells left running, as " pid pid ... " in $left: the shell's
# children when the last cell ended (session.bash's post hook writes them to
# $dir/jobs), as reap.sh takes them. Their trees are not the running cell's:
# a background job, or the program of an interrupted cell that bash 3.2 (under load) no
# longer waited for (vim, ssh: it reads the terminal until its SIGTERM) and
# which would otherwise be taken for the next cell's, and stop it.
left_running() {
  local line
  left=" "
  [[ -n $dir ]] || builtin return 0
  { while builtin read -r line; do left+="$line "; done < "$dir/jobs"; } 2>/dev/null
}

# The running cell's process tree, as "pid pid ..." in $tree; $looked
# says it was looked at (the portable one may not look: see there).
collect_tree() {
  local queue=("$shell") pid kids left
  tree= looked=yes
  left_running
  while (( ${#queue[@]} )); do
    pid=${queue[0]} queue=("${queue[@]:1}")
    if [[ $left == *" $pid "* ]]; then continue; fi
    tree+=" $pid"
    kids=
    builtin read -r kids < "/proc/$pid/task/$pid/children" 2>/dev/null
    # shellcheck disable=SC2206
    queue+=($kids)
  done
}

# Whether PID waits for input on the terminal; if so, sets $reads_done
# (its count of read calls, which tells one read from the next), $asked
# (how many bytes it asked for, 1 when its call does not say) and
# $keys_only (it only waits if the terminal is in key mode: see above).
waiting() {
  local pid=$1 nr arg buf count rest line
  [[ /proc/$pid/fd/0 -ef $tty ]] || builtin return 1
  builtin read -r nr arg buf count rest < "/proc/$pid/syscall" || builtin return 1
  keys_only= asked=1
  if [[ $reads == *" $nr "* ]]; then
    [[ /proc/$pid/fd/$(( arg )) -ef $tty ]] || builtin return 1
    if [[ $nr != "$readv" ]] && (( count > 0 )); then asked=$(( count )); fi
  elif [[ $selects == *" $nr "* && $arg == 0x1 ]]; then
    :
  elif [[ $selects == *" $nr "* || $polls == *" $nr "* ]]; then
    keys_only=yes
  else
    builtin return 1
  fi
  reads_done=0
  while builtin read -r line; do
    if [[ $line == syscr:* ]]; then reads_done=${line#syscr: }; break; fi
  done < "/proc/$pid/io"
}

# Says that PID waits in its read number READS of ASKED bytes: with its
# name, its parent's name and the terminal's modes (a fork for stty, once
# per read). With KEYS_ONLY, only if the terminal is in key mode (else
# returns 2).
report() {
  local pid=$1 reads_done=$2 asked=$3 keys_only=$4 name= stat ppid parent= echo=1 lines=1 keys=0 modes marked fd fifo
  # The last cell that ended (session.bash's post hook writes it first in
  # $dir/status): this read's cell is the one after it (see discard).
  ended_at_report=
  if [[ -n $dir ]]; then { builtin read -r ended_at_report < "$dir/status"; } 2>/dev/null; fi
  modes=" $(stty -a < "$tty") "
  case $modes in *[[:space:]]-echo[[:space:]]*) echo=0 ;; esac
  case $modes in *[[:space:]]-icanon[[:space:]]*) lines=0 keys=$asked ;; esac
  case $modes in *[[:space:]]-icrnl[[:space:]]*) keys=0 ;; esac
  if [[ -n $keys_only && $lines == 1 ]]; then builtin return 2; fi
  if [[ -n $portable ]]; then
    names "$pid"
  else
    builtin read -r name < "/proc/$pid/comm"
    builtin read -r stat < "/proc/$pid/stat"
    stat=${stat##*) }  # after the name, which may hold spaces and parentheses
    ppid=${stat#* }; ppid=${ppid%% *}
    builtin read -r parent < "/proc/$ppid/comm"
  fi
  marked=1
  for fd in 61 62; do
    if [[ -n $portable ]]; then
      # No way into the shell's descriptors, but a durable session's go to
      # the FIFOs of its spool (opened read-write: that never blocks).
      fifo=$dir/out.fifo
      if [[ $fd == 62 ]]; then fifo=$dir/err.fifo; fi
      if [[ -z $dir || ! -p $fifo ]]; then marked=0; break; fi
      __shell_kernel_frame "$token" barrier "read.$pid.$reads_done" \
        2>/dev/null 1<> "$fifo" || marked=0
      continue
    fi
    __shell_kernel_frame "$token" barrier "read.$pid.$reads_done" \
      2>/dev/null > "/proc/$shell/fd/$fd" || marked=0
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

# The portable detector: ps's wait channels, where a process blocked in a
# read of a terminal shows as ttyin (BSD, macOS) or n_tty_read / wait_woken
# (Linux), and one in select or poll as such. Which terminal, and which
# descriptor, ps does not say: a read of a terminal by the shell's tree is
# taken for one of this terminal (the cells' standard input, and no cell has
# a controlling terminal to read), select in the shell itself for bash's
# read -t, and select or poll elsewhere for a program of keys. Reads are
# told apart by the kernel's answers: after each one it changes the
# terminal's size in pixels (which nothing reads), and the SIGWINCH counts.
# A cell that runs costs a ps and an awk every 0.15 s; between cells, only two reads of files session.bash writes
# ($dir/cell when a cell starts, $dir/status when it ends).
answers=0 counted=0
ended_at_report=
if [[ -n $portable ]]; then
  trap 'answers=$(( answers + 1 ))' WINCH
  shell_alive() { builtin kill -0 "$shell" 2>/dev/null; }
  # Reading the terminal still (else its read is over, and what it left may go).
  still_reading() { builtin kill -0 "$1" 2>/dev/null; }
  # A new cell counts as an answer too: the shell's read in the next cell is another read.
  cell_seen= cells_seen=
  shell_idle() {
    local started= ended=
    [[ -n $dir ]] || builtin return 1
    { builtin read -r started < "$dir/cell" && builtin read -r ended < "$dir/status"; } 2>/dev/null
    if [[ $started != "$cell_seen" ]]; then cell_seen=$started answers=$(( answers + 1 )); fi
    cells_seen="$started $ended"
    [[ -z $started ]] || (( ${started:-0} <= ${ended:-0} ))
  }
  # Sets $tree to the waiting processes of the shell's tree, $waits to
  # " pid:read" or " pid:select" for each, and $names to " pid:NAME/PARENT"
  # (command names, which may hold spaces). The wait channel is ps's last
  # column: procps cuts any other to 6 letters, where n_tty_write (a
  # program blocked writing to a terminal) looks as n_tty_read does.
  collect_tree() {
    local pid kind names_of left
    tree= waits=" " names=$'\n' looked=
    # The answers counted before ps looks label the reads it shows: one
    # counted later came after the look, so the read ps saw waiting may be
    # the one it answered (taken since), not a read after it.
    counted=$answers
    # Typed input not yet taken (asked after counting, and before ps looks:
    # an answer counted is in the terminal by then): it is on its way to a
    # read that ends, which ps may still show waiting. Bash 3.2 cannot ask.
    if (( BASH_VERSINFO[0] >= 4 )) && builtin read -r -t 0 -u 8; then builtin return 0; fi
    looked=yes
    left_running
    while IFS=' ' builtin read -r pid kind names_of; do
      tree+=" $pid" waits+="$pid:$kind " names+="$pid:$names_of"$'\n'
    done < <(LC_ALL=C ps -A -o pid= -o ppid= -o comm= -o wchan= 2>/dev/null | awk -v shell="$shell" -v left="$left" '
      { parent[$1] = $2; wchan[$1] = $NF; name = $0
        sub(/^ *[0-9]+ +[0-9]+ +/, "", name); sub(/ +[^ ]+ *$/, "", name); sub(/.*\//, "", name)
        comm[$1] = name }
      END {
        for (p in parent) {
          for (q = p; q != "" && q != shell && q > 1 && hops++ < 128; q = parent[q])
            if (index(left, " " q " ")) break
          hops = 0
          if (q != shell) continue
          w = wchan[p]
          if (w ~ /^(ttyin|ttyrd|n_tty_read|wait_woken)/) kind = "read"
          else if (w ~ /^(select|poll|kqread|do_sel|do_sys|poll_s|core_s|ep_pol|do_epo)/) kind = "select"
          else continue
          print p, kind, comm[p] "/" comm[parent[p]]
        } }')
    # A cell that ended or began while ps looked (a busy host): what it saw
    # may be the shell between cells, whose reset of the terminal before the
    # next cell reads with read -t. Not looked at, then.
    local before=$cells_seen
    shell_idle
    if [[ $cells_seen != "$before" ]]; then tree= waits=" " looked=; fi
  }
  waiting() {
    local pid=$1 kind
    kind=${waits#* $pid:}; kind=${kind%% *}
    keys_only= asked=1 reads_done=$counted
    if [[ $kind == select && $pid != "$shell" ]]; then keys_only=yes; fi
  }
  # Sets $name and $parent, PID's command name and its parent's (macOS
  # prints the executable's path: its last part).
  names() {
    local both=${names#*$'\n'"$1":}
    both=${both%%$'\n'*}
    name=${both%/*} parent=${both##*/}
  }
  in_cell() { :; }  # the files tell (shell_idle)
else
  shell_alive() { [[ -e /proc/$shell ]]; }
  still_reading() { [[ /proc/$1/fd/0 -ef $tty ]]; }
  # The cell's code runs (with the terminal as its input), not the kernel's
  # lines around it: the post hook, which writes $dir/jobs (read half
  # written, it would leave an interrupted cell's program in the next cell's
  # tree), or the reset of the terminal before the next cell.
  in_cell() { [[ /proc/$shell/fd/0 -ef $tty ]]; }
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
    if (( ${#reported[@]} )); then pause 0.1; elif ! shell_idle; then pause 0.15; else pause 0.2; fi
  elif (( ${#reported[@]} )) || ! shell_idle; then pause 0.05; else pause 0.2; fi
done
