# shell_kernel: the kernel's questions between cells (completion, inspection,
# is-complete, history), included into session.bash.

# A request from the kernel (completion, inspection, is-complete, history), run
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
          line=$("${BASH:-bash}" --norc --noprofile -n "$reply.tmp" 2>&1)
          # Bash 3.2 does not warn of an open here-document: a line `&&`
          # after the code is a syntax error anywhere but in a quote or in
          # that document, which takes it in.
          if (( BASH_VERSINFO[0] < 4 )) && [[ $line != *"looking for matching"* ]] \
              && [[ -z $line || $line == *"unexpected end of file"* ]]; then
            builtin printf '%s\n&&\n' "$word" >| "$reply.tmp"
            if [[ $("${BASH:-bash}" --norc --noprofile -n "$reply.tmp" 2>&1) != *"\`&&'"* ]]; then
              line="here-document open at end of file; $line"
            fi
          fi
          builtin printf '%s\n' "$line"
        fi ;;
      history)  # a \036 as each entry's time stamp marks where its text starts
        HISTTIMEFORMAT=$'\036' builtin history ;;
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
