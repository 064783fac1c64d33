# shell_kernel: the cells' history, and fc run in a cell, included into
# session.bash.

# The history holds the notebook's cells, one entry per cell, added by the
# post hook when the cell ends (with history off, the kernel's own lines are
# never recorded). What bash loaded from ~/.bash_history is dropped: a
# notebook's output is often shared, and the file is not written back.
builtin history -c
# `history -s` with the user's HISTIGNORE and HISTCONTROL set aside: $1 is
# HISTIGNORE meanwhile (`*`: nothing is added), $2 the line. Status 1, and
# nothing done, when either is readonly (tried in a subshell: assigning to a
# readonly variable abandons the whole command line, the post hook's too).
__shell_kernel_history_push() {
  builtin local ignore="${HISTIGNORE-}" control="${HISTCONTROL-}" had="${HISTIGNORE+i}${HISTCONTROL+c}"
  builtin local flags="$-" status=1
  ( HISTIGNORE= && HISTCONTROL= ) 2>/dev/null || builtin return 1
  builtin set +a  # (allexport would export them)
  HISTIGNORE=$1 HISTCONTROL=
  builtin history -s -- "$2" && status=0
  if [[ $had == *i* ]]; then HISTIGNORE=$ignore; else builtin unset -v HISTIGNORE; fi
  if [[ $had == *c* ]]; then HISTCONTROL=$control; else builtin unset -v HISTCONTROL; fi
  if [[ $flags == *a* ]]; then builtin set -a; fi
  builtin return "$status"
}
# Bash <= 4.2: `history -s` first deletes the last entry (taken for the line
# that called it, recorded while history was on) instead of adding, and with
# the history empty it never adds at all. One entry read from a file is what
# an ignored `history -s` deletes then: from there on, as after every
# `history -s`, the next one adds without deleting first (it deletes only
# while the last line was the shell's own, not pushed). Told by trying it,
# not from the version number. The entry is `:`, not `#`, which the file's
# reader takes for a time stamp.
builtin history -s -- :
__shell_kernel_value=
if [[ -n $__shell_kernel_scratch ]]; then
  builtin history >| "$__shell_kernel_scratch"
  [[ -s $__shell_kernel_scratch ]] || __shell_kernel_value=none
  builtin : >| "$__shell_kernel_scratch"
fi
if [[ $__shell_kernel_value == none ]]; then
  { builtin printf ':\n' >| "$__shell_kernel_dir/history"
    builtin history -r "$__shell_kernel_dir/history"
    builtin command rm -f -- "$__shell_kernel_dir/history"; } 2>/dev/null
  __shell_kernel_history_push '*' : || builtin true  # (readonly: the first cell's entry replaces it)
else
  builtin history -c
fi
builtin unset -v __shell_kernel_value

# The newest history entry: its number in __shell_kernel_hist_n (0: none),
# its text in __shell_kernel_hist_text. A fork: for cells that run fc only.
__shell_kernel_newest() {
  builtin local line
  line=$(builtin unset -v HISTTIMEFORMAT; builtin history 1)
  line=${line#"${line%%[! ]*}"}
  __shell_kernel_hist_n=${line%%[!0-9]*}
  line=${line#"$__shell_kernel_hist_n"}
  __shell_kernel_hist_text=${line#[* ] }
  if [[ -z $__shell_kernel_hist_n ]]; then __shell_kernel_hist_n=0; fi
}

# fc and the cells' history (the kernel names a cell that runs fc in its
# resume call, with its text). Bash 3.2's fc takes the newest entry for the
# fc command itself, as a terminal has added it by then: there that cell's
# text is added before it runs, so that `fc -l` lists every cell before it
# and `fc -s` re-runs the last, as on 5.2. Whether fc does so is tried at
# the first such cell, in a subshell (the list stays untouched, and no
# other cell pays for the fork).
__shell_kernel_fc_skips=
__shell_kernel_fc= __shell_kernel_fc_text= __shell_kernel_fc_standin=
__shell_kernel_fc_begin() {
  if [[ -z $__shell_kernel_fc_skips ]]; then
    __shell_kernel_fc_skips=no
    if [[ $(builtin unset -v HISTIGNORE HISTCONTROL; builtin history -s -- ': 1'
            builtin history -s -- ': 2'; builtin fc -ln -1 2>&1) == *': 1' ]]; then
      __shell_kernel_fc_skips=yes
    fi
  fi
  __shell_kernel_fc=yes __shell_kernel_fc_text=$1 __shell_kernel_fc_standin=
  if [[ $__shell_kernel_fc_skips == yes ]] && __shell_kernel_history_push '' "$1"; then
    __shell_kernel_newest
    if [[ $__shell_kernel_hist_text == "$1" ]]; then __shell_kernel_fc_standin=$__shell_kernel_hist_n; fi
  fi
}
# After such a cell, before its own entry is added. Where the cell's text
# was added first (3.2) and is still the newest entry, it goes (a re-run
# adds none; another cell's entry is added as usual). Where fc -s replaced
# it with what it re-ran, the cell before goes too: bash 5.2's `fc -s`
# replaces the newest entry, which there is the last cell. Then, on bash
# <= 4.2, the command that fc -s re-ran was added as a line of the shell's
# own, which the next `history -s` deletes first: an ignored push deletes
# it now (and only then: a pushed line is never deleted), and it is pushed
# again.
__shell_kernel_fc_end() {
  builtin local n text
  __shell_kernel_fc=
  if [[ -n $__shell_kernel_fc_standin ]]; then
    __shell_kernel_newest
    if (( __shell_kernel_hist_n == __shell_kernel_fc_standin )); then
      if [[ $__shell_kernel_hist_text == "$__shell_kernel_fc_text" ]]; then
        builtin history -d "$__shell_kernel_hist_n" 2>/dev/null || builtin true
        builtin return 0
      fi
      builtin history -d "$(( __shell_kernel_hist_n - 1 ))" 2>/dev/null || builtin true
    fi
  fi
  __shell_kernel_newest
  n=$__shell_kernel_hist_n text=$__shell_kernel_hist_text
  if (( n == 0 )) || ! __shell_kernel_history_push '*' :; then builtin return 0; fi
  __shell_kernel_newest
  if (( __shell_kernel_hist_n < n )); then builtin history -s -- "$text" || builtin true; fi
}
