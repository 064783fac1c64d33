# shell_kernel: the prompt watcher's detector without /proc (the BSDs,
# macOS; SHELL_KERNEL_NO_PROC on Linux), put into prompts.bash (see there).

# The portable detector: ps's wait channels, where a process blocked in a
# read of a terminal shows as ttyin (BSD, macOS) or n_tty_read / wait_woken
# (Linux), and one in select or poll as such. Which terminal, and which
# descriptor, ps does not say: a read of a terminal by the shell's tree is
# taken for one of this terminal (the cells' standard input, and no cell has
# a controlling terminal to read), select in the shell itself for bash's
# read -t, and select or poll elsewhere for a program of keys. Reads are
# told apart by the kernel's answers: after each one it changes the
# terminal's size in pixels (which nothing reads), and the SIGWINCH counts.
# A cell that runs costs a ps and an awk every 0.15 s; between cells, only
# two reads of files that the session writes ($dir/cell when a cell starts,
# $dir/status when it ends).
answers=0 counted=0
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
        if (w ~ /^(ttyin|ttyrd|n_tty_read)/) kind = "read"
        else if (w ~ /^wait_woken/) kind = "woken"
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
# Linux shows wait_woken for a read of a terminal and for a wait on a TCP
# socket (its data, a connect) alike, so an ssh client in its handshake
# would look like a prompt. Linux's ps reads /proc, where the process's descriptors
# tell them apart: one holding a socket is taken to wait on it (a program
# that asks with a socket open goes unasked, as without the watcher), one
# without the terminal reads something else.
reads_terminal() {
  local fd seen= terminal=
  for fd in "/proc/$1/fd/"*; do
    [[ -e $fd ]] || continue
    seen=yes
    if [[ -S $fd ]]; then builtin return 1; fi
    if [[ $fd -ef $tty ]]; then terminal=yes; fi
  done
  [[ -z $seen || -n $terminal ]]  # no descriptors to see: as the wait channel says
}
waiting() {
  local pid=$1 kind
  kind=${waits#* $pid:}; kind=${kind%% *}
  if [[ $kind == woken ]]; then reads_terminal "$pid" || builtin return 1; fi
  keys_only= asked=1 reads_done=$counted
  if [[ $kind == select && $pid != "$shell" ]]; then keys_only=yes; fi
}
# Sets $name and $parent, PID's command name and its parent's (macOS
# prints the executable's path: its last part), as ps saw them; none when
# PID is gone since.
names() {
  builtin kill -0 "$1" 2>/dev/null || builtin return 0
  local both=${names#*$'\n'"$1":}
  both=${both%%$'\n'*}
  name=${both%/*} parent=${both##*/}
}
in_cell() { :; }  # the files tell (shell_idle)
# A barrier frame with nonce $2 for the shell's descriptor $1 (61 or 62,
# where the cells write). No way into the shell's descriptors, but a durable
# session's go to the FIFOs of its spool (opened read-write: that never
# blocks). Status 1 when it could not be written, 2 when there is no FIFO.
barrier() {
  local fifo=$dir/out.fifo
  if [[ $1 == 62 ]]; then fifo=$dir/err.fifo; fi
  if [[ -z $dir || ! -p $fifo ]]; then builtin return 2; fi
  __shell_kernel_frame "$token" barrier "$2" 2>/dev/null 1<> "$fifo" || builtin return 1
}
