# shell_kernel: the commands that cells find defined (display, displayHTML,
# displayJS, clear, tput, exit), and the payload hand-over that display and
# the queries use, included into session.bash.

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
