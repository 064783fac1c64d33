# shell_kernel: the kernel's questions between cells (completion, inspection,
# is-complete, history), included into session.bash.

# A request from the kernel (completion, inspection, is-complete, history), run
# between cells. It writes its answer as a "reply" frame carrying the bytes
# of $__shell_kernel_dir/reply; its output and errors never reach a cell.
# $1: sequence number, $2: what, $3: the word or code.
__shell_kernel_query() {
  # (The user's locale, for completion functions.)
  builtin local locale="${LC_ALL-}" locale_set="${LC_ALL+set}"
  builtin local seq="$1" what="$2" word="$3" reply="$__shell_kernel_dir/reply" line LC_ALL=C
  {
    case $what in
      complete) __shell_kernel_complete "$word" ;;
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

# Completion as readline has bash do it, in a subshell of this shell: it has
# the shell's functions, variables and `complete` specs (the user's own
# too), and nothing it does stays ($?, $_, $!, traps, options, variables,
# the directory; a spec that bash-completion's loader reads is read again
# next time). A slow one is the kernel's to stop (SIGINT, after its time
# bound): this shell then abandons the query, with its state as it was.
# $1: the kernel's request, one field a line (see completion.py): the
# fallback's kind and word, then, where bash would run the completion of a
# command's arguments: COMP_LINE, COMP_POINT, COMP_CWORD, the command's
# name, the word to complete, COMP_WORDS. The answer: bash's version and
# COMP_WORDBREAKS (the request's split assumed defaults), how the matches
# came ("spec" and the options in force, or "fallback"), the matches.
__shell_kernel_complete() (
  builtin set +o errexit +o nounset +o xtrace +o noglob +o histexpand
  if [[ -n $locale_set ]]; then LC_ALL=$locale; else builtin unset -v LC_ALL; fi
  builtin local request="$1" kind word cur name plain line options= tries=0 status fallback=
  builtin local -a fields matches
  fields=() matches=()
  while [[ $request == *$'\n'* ]]; do
    fields[${#fields[@]}]=${request%%$'\n'*}
    request=${request#*$'\n'}
  done
  fields[${#fields[@]}]=$request
  kind=${fields[0]} word=${fields[1]}
  # (A newline in it is said apart: 1 if there is one.)
  line=${COMP_WORDBREAKS-}
  status=0
  if [[ $line == *$'\n'* ]]; then status=1; fi
  builtin printf '%s.%s %d %s\n' "${BASH_VERSINFO[0]}" "${BASH_VERSINFO[1]}" "$status" "${line//$'\n'/}"
  if (( ${#fields[@]} >= 8 )); then
    COMP_LINE=${fields[2]} COMP_POINT=${fields[3]} COMP_CWORD=${fields[4]}
    name=${fields[5]} cur=${fields[6]} COMP_TYPE=9 COMP_KEY=9
    COMP_WORDS=("${fields[@]:7}")
    # A spec for the name, or for its last part (a path), else the default
    # spec (-D: bash-completion's loader, which reads the command's spec
    # and says so with status 124: then again).
    while (( tries++ < 4 )); do
      __shell_kernel_spec -- "$name" \
        || { [[ $name == */* ]] && __shell_kernel_spec -- "${name##*/}"; } \
        || __shell_kernel_spec -D || builtin break
      __shell_kernel_spec_matches
      if [[ -n $fallback ]]; then builtin break; fi
      if (( status != 124 )); then
        builtin printf 'spec%s\n' "$options"
        builtin printf '%s\n' "${matches[@]}"
        builtin return 0
      fi
      matches=() options=
    done
  fi
  builtin printf 'fallback\n'
  case $kind in
    commands) builtin compgen -A command -A alias -A function -A builtin -A keyword -- "$word" ;;
    variables) builtin compgen -v -- "$word" ;;
    paths) __shell_kernel_files -f "$word"; builtin printf '%s\n' "${matches[@]}" ;;
  esac
) </dev/null

# The spec that `complete -p ARGS` prints, into spec_* variables.
__shell_kernel_spec() {
  builtin local text
  builtin complete -p "$@" >| "$__shell_kernel_dir/reply.spec" 2>/dev/null || builtin return 1
  IFS= builtin read -r -d '' text < "$__shell_kernel_dir/reply.spec"
  [[ $text == complete\ * ]] || builtin return 1
  spec_function= spec_command= spec_filter= spec_prefix= spec_suffix= spec_options= spec_actions=()
  builtin eval "__shell_kernel_spec_words ${text#complete }"
}
__shell_kernel_spec_words() {
  while (( $# > 1 )); do  # (the last: the name, or -D)
    case $1 in
      -o) spec_options+=" $2"; builtin shift ;;
      -F) spec_function=$2; builtin shift ;;
      -C) spec_command=$2; builtin shift ;;
      -X) spec_filter=$2; builtin shift ;;
      -P) spec_prefix=$2; builtin shift ;;
      -S) spec_suffix=$2; builtin shift ;;
      -A|-G|-W) spec_actions+=("$1" "$2"); builtin shift ;;
      -D|-E|-I) ;;
      -?) spec_actions+=("$1") ;;
    esac
    builtin shift
  done
}

# A spec's matches, as bash makes them: its actions, function and command,
# the filter, prefix and suffix, then what its options add (-o default:
# file names, bashdefault: the fallback, dirnames, plusdirs). The function
# runs with what readline sets; its compopt calls (an error outside real
# completion) change the options in force here. Status: the function's.
__shell_kernel_spec_matches() {
  builtin local match pattern negate
  builtin local -a kept
  kept=()
  options=$spec_options status=0
  if (( ${#spec_actions[@]} )); then
    __shell_kernel_dequote "$cur"
    builtin compgen "${spec_actions[@]}" -- "$plain" >| "$__shell_kernel_dir/reply.spec" 2>/dev/null
    __shell_kernel_lines "$__shell_kernel_dir/reply.spec"
    case " ${spec_actions[*]} " in  # file names, which readline marks and quotes
      *" -f "*|*" -d "*|*" -A file "*|*" -A directory "*) options+=" filenames" ;;
    esac
  fi
  if [[ -n $spec_function ]]; then
    COMPREPLY=()
    compopt() { __shell_kernel_compopt "$@"; }
    "$spec_function" "$name" "$cur" "${COMP_WORDS[COMP_CWORD-1]-}" >/dev/null 2>&1
    status=$?
    builtin unset -f compopt
    matches+=("${COMPREPLY[@]}")
  fi
  if [[ -n $spec_command ]]; then
    builtin export COMP_LINE COMP_POINT COMP_TYPE COMP_KEY
    builtin eval "$spec_command"' "$name" "$cur" "${COMP_WORDS[COMP_CWORD-1]-}"' \
      >| "$__shell_kernel_dir/reply.spec" 2>/dev/null
    __shell_kernel_lines "$__shell_kernel_dir/reply.spec"
  fi
  if [[ -n $spec_filter ]]; then  # -X: away what matches (with !: what does not)
    pattern=${spec_filter//&/"$cur"} negate=
    if [[ $pattern == !* ]]; then pattern=${pattern#!} negate=yes; fi
    for match in "${matches[@]}"; do
      if [[ $match == $pattern ]]; then
        [[ -z $negate ]] || kept+=("$match")
      elif [[ -z $negate ]]; then
        kept+=("$match")
      fi
    done
    matches=("${kept[@]}")
  fi
  if [[ -n $spec_prefix$spec_suffix ]] && (( ${#matches[@]} )); then
    for match in "${!matches[@]}"; do
      matches[match]=$spec_prefix${matches[match]}$spec_suffix
    done
  fi
  if [[ $options == *" plusdirs"* ]] || { (( ! ${#matches[@]} )) && [[ $options == *" dirnames"* ]]; }; then
    __shell_kernel_files -d "$cur"
    options+=" filenames"
  fi
  if (( ! ${#matches[@]} )) && [[ $options == *" default"* ]]; then
    __shell_kernel_files -f "$cur"
    options+=" filenames"
  fi
  if (( ! ${#matches[@]} )) && [[ $options == *" bashdefault"* ]]; then
    fallback=yes
  elif [[ $options == *" filenames"* ]]; then
    for match in "${!matches[@]}"; do
      if [[ -d ${matches[match]} && ${matches[match]} != */ ]]; then matches[match]+=/; fi
    done
  fi
}

# compopt as a completion function calls it: with no name, on the
# completion in progress; else the real one (bash 4+).
__shell_kernel_compopt() {
  builtin local -a words
  words=("$@")
  while (( $# )); do
    case $1 in
      -o) options+=" $2"; builtin shift 2 ;;
      +o) options=" ${options} "; options=${options// $2 / }; options=${options% }; builtin shift 2 ;;
      *) builtin compopt "${words[@]}"; builtin return ;;
    esac
  done
}

# Lines of file $1 added to matches.
__shell_kernel_lines() {
  builtin local match
  while IFS= builtin read -r match; do matches+=("$match"); done < "$1"
}

# $1 as readline hands it to file name completion, in $plain: quotes and
# the backslashes that quote a character out.
__shell_kernel_dequote() {
  builtin local rest="$1" quote= c
  plain=
  while [[ -n $rest ]]; do
    c=${rest:0:1} rest=${rest:1}
    if [[ -n $quote ]]; then
      if [[ $c == "$quote" ]]; then quote=; else plain+=$c; fi
    elif [[ $c == [\"\'] ]]; then
      quote=$c
    elif [[ $c == \\ ]]; then
      plain+=${rest:0:1} rest=${rest:1}
    else
      plain+=$c
    fi
  done
}

# File names (compgen $1: -f, or -d for directories) for word $2, added to
# matches, directories marked by a /.
__shell_kernel_files() {
  builtin local match
  __shell_kernel_dequote "$2"
  builtin compgen "$1" -- "$plain" >| "$__shell_kernel_dir/reply.spec" 2>/dev/null
  while IFS= builtin read -r match; do
    if [[ -d $match ]]; then match=$match/; fi
    matches+=("$match")
  done < "$__shell_kernel_dir/reply.spec"
}
