# shell_kernel: which command made a cell fail, and on which line (the ERR
# trap, and __shell_kernel_failure, which the post hook calls), included
# into session.bash.

# Which command set a failing cell's status, and where. The ERR trap notes
# each failure at the cell's own level (bash runs it neither inside
# functions nor in subshells, unless the user sets -E), so succeeding
# commands cost nothing; the kernel's own commands are not noted. A user's
# ERR trap replaces this one (their failing cells then give the status only).
__shell_kernel_failed=() __shell_kernel_why_line= __shell_kernel_why_command=
# A failure with stdout elsewhere than the cell's (fd 61) is the kernel's
# own: its start-of-cell line, or the eval that runs the cell, which fails
# after it (and whose BASH_COMMAND is then not always the eval).
# (One line: $LINENO in a trap counts the trap's own lines too.)
__shell_kernel_on_err='{ __shell_kernel_note=("$?" "$LINENO" "${PIPESTATUS[*]}" "$BASH_COMMAND");'
__shell_kernel_on_err+=' if [[ /dev/fd/1 -ef /dev/fd/61 ]]; then'
__shell_kernel_on_err+=' __shell_kernel_failed=("${__shell_kernel_note[@]}"); fi; } 2>/dev/null'
if [[ -n $__shell_kernel_scratch ]]; then
  builtin trap -p ERR >| "$__shell_kernel_scratch"
  [[ -s $__shell_kernel_scratch ]] && __shell_kernel_value=kept || __shell_kernel_value=
  builtin : >| "$__shell_kernel_scratch"
else
  __shell_kernel_value=$(builtin trap -p ERR)
fi
if [[ -z $__shell_kernel_value ]]; then builtin trap -- "$__shell_kernel_on_err" ERR; fi
builtin unset -v __shell_kernel_on_err __shell_kernel_value

# Sets __shell_kernel_why_line and __shell_kernel_why_command for a cell
# that ended with status $1, if the last noted failure has that status: it
# is then the command that set it, except after a status that the trap does
# not see (`! cmd`, `false && x`) which happens to equal an earlier one.
# A pipeline whose last command did not set the status (pipefail) gives
# the line only (the kernel names the line's text).
# BASH_COMMAND is the command after alias expansion: an alias's text goes
# back to the name that was typed (Debian's ls='ls --color=auto': the user
# wrote `ls /x`), the longest that fits. Only the cell's command words
# (__shell_kernel_words, from the kernel) are looked up: the cost does not
# grow with the number of aliases.
__shell_kernel_failure() {
  builtin local command __shell_kernel_aliases __shell_kernel_alias __shell_kernel_value
  builtin local __shell_kernel_typed= IFS=' '
  [[ ${__shell_kernel_failed[0]-} == "$1" ]] || builtin return 0
  command=${__shell_kernel_failed[3]:0:200}
  if [[ ${__shell_kernel_failed[2]##* } != "$1" ]]; then command=; fi
  if [[ -n $command && -n ${__shell_kernel_words-} ]]; then
    # Split here, not read from a here-string (a temporary file before bash
    # 5.1). The words hold no glob or quote character (see protocol.py).
    __shell_kernel_aliases=$(builtin alias -- $__shell_kernel_words 2>/dev/null; builtin true)$'\n'
    while [[ -n $__shell_kernel_aliases ]]; do
      __shell_kernel_alias=${__shell_kernel_aliases%%$'\n'*}
      __shell_kernel_aliases=${__shell_kernel_aliases#*$'\n'}
      __shell_kernel_alias=${__shell_kernel_alias#alias }
      __shell_kernel_value=${__shell_kernel_alias#*=}
      if [[ $__shell_kernel_value != \'?*\' ]]; then builtin continue; fi
      __shell_kernel_value=${__shell_kernel_value:1:${#__shell_kernel_value}-2}
      __shell_kernel_value=${__shell_kernel_value//\'\\\'\'/\'}
      if [[ ( ${__shell_kernel_failed[3]} == "$__shell_kernel_value" \
              || ${__shell_kernel_failed[3]} == "$__shell_kernel_value "* ) \
            && ${#__shell_kernel_value} -gt ${#__shell_kernel_typed} ]]; then
        __shell_kernel_typed=$__shell_kernel_value
        command=${__shell_kernel_alias%%=*}${__shell_kernel_failed[3]:${#__shell_kernel_value}}
        command=${command:0:200}
      fi
    done
  fi
  __shell_kernel_why_line=$(( __shell_kernel_failed[1] - ${__shell_kernel_line:-0} + 1 ))
  __shell_kernel_why_command=$command  # (frame.bash escapes it)
}
