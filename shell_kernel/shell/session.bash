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
#     __shell_kernel_resume ''; builtin eval -- $'<cell>' </dev/null >&61 2>&62
#     __shell_kernel_rc=$? ...; __shell_kernel_post <seq>
# and the post hook writes the status file and an end frame on both streams.
# Frames start with \036\037 + a per-session token, bytes that `set`,
# `declare -p` and `env` never print raw, so no state dump can fake one.

exec 61>&1 62>&2 1>/dev/null 2>/dev/null

__shell_kernel_pid=$$
# A durable session's launcher made the directory already (and set it).
if [[ -z ${__shell_kernel_dir-} ]]; then
  __shell_kernel_dir=$(builtin umask 077 && builtin command mktemp -d "${TMPDIR:-/tmp}/shell_kernel.XXXXXXXXXX" 2>/dev/null) \
    || { __shell_kernel_dir=${TMPDIR:-/tmp}/shell_kernel.$$.$RANDOM$RANDOM$RANDOM \
         && builtin command mkdir -m 700 -- "$__shell_kernel_dir"; } \
    || __shell_kernel_dir=
fi
if [[ -n $__shell_kernel_dir ]]; then
  (builtin umask 077 && builtin : >| "$__shell_kernel_dir/status") 2>/dev/null
fi

# The prompt machinery is useless without a terminal and would only cost
# time (a PS1 with $(git ...) forks twice per cell).
PS1= PS2= PS0= PS4='+ '
builtin unset -v PROMPT_COMMAND MAILCHECK HISTFILE
builtin set +o history +o monitor
builtin shopt -s huponexit 2>/dev/null

# Programs must never wait for a terminal: no pagers, unbuffered Python.
builtin export PAGER=cat GIT_PAGER=cat MANPAGER=cat SYSTEMD_PAGER= \
  PYTHONUNBUFFERED=1 TERM=dumb

# The shell's children, as pids. At the end of a cell no cell runs, so they
# are all background jobs: every process of a pipeline, disowned and nohup'd
# jobs too (`jobs -p` lists neither). reap.sh spares their trees when it
# interrupts a later cell or query. Linux lists them without a fork.
__shell_kernel_children() {
  builtin local children self pid ppid
  if [[ -r /proc/$$/task/$$/children ]]; then
    IFS= builtin read -r children < "/proc/$$/task/$$/children"
    builtin printf '%s\n' "$children"
    builtin return 0
  fi
  # ps lists itself as a child: it runs as the command substitution, whose
  # pid comes first.
  children=$(builtin printf '%s\n' "$BASHPID"; builtin exec ps -A -o pid= -o ppid= 2>/dev/null)
  { IFS= builtin read -r self
    while IFS=$' \t' builtin read -r pid ppid; do
      if [[ $ppid == "$$" && $pid != "$self" ]]; then builtin printf '%s\n' "$pid"; fi
    done; } <<< "$children"
}
# Jobs that the startup files left running are background jobs too.
if [[ -n $__shell_kernel_dir ]]; then
  (builtin umask 077 && __shell_kernel_children >| "$__shell_kernel_dir/jobs") 2>/dev/null
fi

# End of a cell: record the status, then frame the end on both streams.
# The kernel sends
#     __shell_kernel_rc=$? __shell_kernel_flags=$-; builtin set +T; __shell_kernel_post <seq>
# so that a user's DEBUG trap under `set -T` (which could `return` from this
# function) is not inherited; -T is restored on the way out.
# The kernel sends the line again after an interrupt, in case the first was
# cut short; a repeat only repeats the frame.
__shell_kernel_post() {
  builtin local seq="$1" status="$__shell_kernel_rc"
  if [[ -n ${__shell_kernel_exit-} ]]; then
    status=$__shell_kernel_exit
    __shell_kernel_rc=$status  # what the next cell sees as $?
    builtin unset -v __shell_kernel_exit
  fi
  if (( seq > ${__shell_kernel_done:-0} )); then
    __shell_kernel_done=$seq
    if [[ -n ${__shell_kernel_dir-} ]]; then
      { builtin printf '%s\n%s\n%s' "$seq" "$status" "${PWD-}" >| "$__shell_kernel_dir/status"
        __shell_kernel_children >| "$__shell_kernel_dir/jobs"
        if [[ -n ${__shell_kernel_snapshot-} ]]; then
          builtin export -p >| "$__shell_kernel_dir/exports"
        fi; } 2>/dev/null || builtin true
    fi
  fi
  if (( seq == __shell_kernel_done )); then  # else: a late repeat for a cell long over
    builtin printf '\036\037%s\037end\037%s\037%s\037%s\037\036' \
      "$__shell_kernel_token" "$seq" "$status" "${PWD-}" >&61 2>/dev/null || builtin true
    builtin printf '\036\037%s\037end\037%s\037\036' \
      "$__shell_kernel_token" "$seq" >&62 2>/dev/null || builtin true
  fi
  if [[ $__shell_kernel_flags == *T* ]]; then builtin set -T; fi
}

# Start of a cell: give the cell the $? that the previous cell left, as
# consecutive commands in a script see it ($_ is empty: after the kernel's
# eval it would hold the previous cell's whole text). Under set -e a non-zero
# status would end the shell here, so it is 0 then (a set -e shell whose
# last command failed has normally exited already).
__shell_kernel_resume() {
  if [[ ${__shell_kernel_flags-} == *e* ]]; then builtin return 0; fi
  builtin return "${__shell_kernel_rc:-0}"
}

# A request from the kernel (completion, inspection, is-complete), run
# between cells. It writes its answer as a "reply" frame carrying the bytes
# of $__shell_kernel_dir/reply; its output and errors never reach a cell.
# $1: sequence number, $2: what, $3: the word or code.
__shell_kernel_query() {
  builtin local seq="$1" what="$2" word="$3" reply="$__shell_kernel_dir/reply" line LC_ALL=C
  {
    case $what in
      commands) builtin compgen -A command -A alias -A function -A builtin -A keyword -- "$word" ;;
      variables) builtin compgen -v -- "$word" ;;
      paths)
        builtin compgen -f -- "$word" >| "$reply.tmp"
        while IFS= builtin read -r line; do
          if [[ -d $line ]]; then line=$line/; fi
          builtin printf '%s\n' "$line"
        done < "$reply.tmp" ;;
      is-complete)  # bash's own parser, in a bash that runs nothing (-n)
        if [[ $word =~ (^|[^\\])(\\\\)*\\$ ]]; then
          builtin echo "line continues: unexpected end of file"  # a trailing backslash
        else
          builtin printf '%s\n' "$word" >| "$reply.tmp"
          "${BASH:-bash}" --norc --noprofile -n "$reply.tmp"
        fi ;;
      inspect)
        builtin type -a -- "$word" 2>&1 | builtin command head -n 20
        case $(builtin type -t -- "$word") in
          builtin|keyword) builtin echo; builtin help "$word" ;;
          file)
            builtin echo
            if builtin command -v man >/dev/null && builtin command man -w -- "$word" >/dev/null; then
              MANWIDTH=80 builtin command man -P cat -- "$word" | builtin command head -n 60
            else
              case $(builtin type -P -- "$word") in
                /bin/*|/sbin/*|/usr/bin/*|/usr/sbin/*|/usr/local/bin/*)
                  builtin command timeout 3 "$word" --help </dev/null 2>&1 | builtin command head -n 60 ;;
              esac
            fi ;;
        esac ;;
    esac
  } >| "$reply" 2>&1 </dev/null
  __shell_kernel_send_file reply "$reply" "$seq" >&61
}

# Hand FILE's bytes to the kernel: copied into the state directory as
# payload.PID.N, named by a frame \036\037token\037KIND\037FIELD...\037SIZE\037NAME\037\036
# that goes out in one short write, so that a background job printing at the
# same moment can neither split the frame nor mix into the bytes (which never
# travel in band); the kernel fetches the file and removes it.
__shell_kernel_payloads=0
__shell_kernel_send_file() {
  builtin local kind="$1" file="$2" size name frame
  builtin shift 2
  size=$(builtin command wc -c < "$file") || builtin return 1
  name=payload.$BASHPID.$(( ++__shell_kernel_payloads ))
  builtin command cp -- "$file" "$__shell_kernel_dir/$name" || builtin return 1
  builtin printf -v frame '\037%s' "$kind" "$@" $(( size )) "$name"
  builtin printf '\036\037%s%s\037\036' "$__shell_kernel_token" "$frame"
}

# display [--mime TYPE] [--id NAME] [FILE]: show FILE (or standard input)
# in the notebook as an image, HTML, Markdown, JSON or text. With --id, a
# later display with the same NAME replaces this one in place.
display() {
  builtin local mime= id= file= size limit="${SHELL_KERNEL_DISPLAY_LIMIT:-16000000}" tmp=
  while (( $# )); do
    case $1 in
      --mime) mime=${2-}; builtin shift 2 || builtin shift ;;
      --mime=*) mime=${1#--mime=}; builtin shift ;;
      --id) id=${2-}; builtin shift 2 || builtin shift ;;
      --id=*) id=${1#--id=}; builtin shift ;;
      -h|--help)
        builtin printf '%s\n' "usage: display [--mime TYPE] [--id NAME] [FILE]" \
          "Shows FILE, or standard input, in the notebook. TYPE defaults from the file name:" \
          "png jpg/jpeg gif svg html/htm md json txt; standard input needs --mime." \
          "--id NAME: a later display with the same NAME updates this one in place."
        builtin return 0 ;;
      --) builtin shift; file=${1-}; break ;;
      -*) builtin printf 'display: unknown option %s (see display --help)\n' "$1" >&2; builtin return 2 ;;
      *) file=$1; builtin shift ;;
    esac
  done
  if [[ -z $mime ]]; then
    case ${file,,} in
      *.png) mime=image/png ;; *.jpg|*.jpeg) mime=image/jpeg ;; *.gif) mime=image/gif ;;
      *.svg) mime=image/svg+xml ;; *.html|*.htm) mime=text/html ;; *.md) mime=text/markdown ;;
      *.json) mime=application/json ;; *.txt) mime=text/plain ;;
      '') builtin printf 'display: reading standard input needs --mime TYPE\n' >&2; builtin return 2 ;;
      *) builtin printf 'display: cannot tell the type of %s; give --mime TYPE\n' "$file" >&2; builtin return 2 ;;
    esac
  fi
  if [[ -z $file ]]; then
    tmp=$__shell_kernel_dir/display.$BASHPID
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

# `exit N` in a cell ends that cell with status N and keeps the shell, as a
# notebook user expects. It unwinds the running cell the way Ctrl-C does (an
# interactive bash abandons the command line on SIGINT and keeps its state).
# Subshells, and shells that trap or ignore SIGINT, really exit.
exit() {
  builtin local status="$?"
  if [[ $BASHPID != "${__shell_kernel_pid-}" ]]; then builtin exit "$@"; fi
  if [[ -n ${1-} ]]; then
    if [[ $1 =~ ^(-?)0*([0-9]+)$ ]]; then
      status=$(( ${BASH_REMATCH[1]}${BASH_REMATCH[2]} & 255 ))
    else
      builtin printf 'bash: exit: %s: numeric argument required\n' "$1" >&2
      status=2
    fi
  fi
  __shell_kernel_exit=$status
  builtin kill -INT "$__shell_kernel_pid"
  builtin exit "$status"
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

builtin printf '\036\037%s\037ready\037%s\037%s\037%s\037%s\037\036' \
  "$__shell_kernel_token" "$$" "$BASH_VERSION" "$__shell_kernel_dir" "$__shell_kernel_restored" >&61
builtin printf '\036\037%s\037ready\037\036' "$__shell_kernel_token" >&62
