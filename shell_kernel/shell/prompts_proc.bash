# shell_kernel: the prompt watcher's detector with /proc (Linux), put into
# prompts.bash (see there): the system call each process of the running
# cell is in, and on which descriptor.

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

# The shell is idle (between cells) when it waits for its commands: in
# read(2) on descriptor 0, or select(2) on it alone, and descriptor 0 is
# then not this terminal.
shell_idle() {
  local nr arg rest
  builtin read -r nr arg rest < "/proc/$shell/syscall" || builtin return 1
  [[ ( $reads == *" $nr "* && $arg == 0x0 ) || ( $selects == *" $nr "* && $arg == 0x1 ) ]] \
    && [[ ! /proc/$shell/fd/0 -ef $tty ]]
}

# The running cell's process tree, as "pid pid ..." in $tree; $looked
# says it was looked at (the portable detector may not look: see there).
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
# $keys_only (it only waits if the terminal is in key mode: see prompts.bash).
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

shell_alive() { [[ -e /proc/$shell ]]; }
still_reading() { [[ /proc/$1/fd/0 -ef $tty ]]; }
# The cell's code runs (with the terminal as its input), not the kernel's
# lines around it: the post hook, which writes $dir/jobs (read half
# written, it would leave an interrupted cell's program in the next cell's
# tree), or the reset of the terminal before the next cell.
in_cell() { [[ /proc/$shell/fd/0 -ef $tty ]]; }

# Sets $name and $parent, PID's command name and its parent's.
names() {
  local stat ppid
  builtin read -r name < "/proc/$1/comm"
  builtin read -r stat < "/proc/$1/stat"
  stat=${stat##*) }  # after the name, which may hold spaces and parentheses
  ppid=${stat#* }; ppid=${ppid%% *}
  builtin read -r parent < "/proc/$ppid/comm"
}

# A barrier frame with nonce $2 on the shell's descriptor $1 (61 or 62,
# where the cells write), through its link in /proc. Status 1 when it
# could not be written.
barrier() {
  __shell_kernel_frame "$token" barrier "$2" 2>/dev/null > "/proc/$shell/fd/$1"
}
