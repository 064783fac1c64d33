# shell_kernel: how the bash code beside and inside the user's shell writes
# a frame. Put into session.bash and prompts.bash where they say
# "#include frame.bash" (see __init__.py).
#
# __shell_kernel_frame [-l] TOKEN KIND [FIELD...] writes
#     \036\037TOKEN\037KIND\037FIELD...\037\036
# (with -l, and a newline) to standard output in one write, so that output
# printed at the same moment can neither split the frame nor mix into it.
# Each field is escaped: %, \036, \037, newline and carriage return become
# %25, %1E, %1F, %0A, %0D (frames.py undoes it), so that no byte of a
# path, command or name can end a field or the frame, or forge one, nor be
# changed by a terminal's output processing (the watcher's frames go
# through one). Pattern substitution: no fork, the same bytes on bash 3.2
# to 5 in any locale.
# Spelled for the user's shell: builtins only (a user's printf function is
# not called), quoted "$@" (IFS and globbing change nothing), locals named as
# the kernel's own (no user variable, even a readonly one, is touched).
__shell_kernel_frame() {
  builtin local __shell_kernel_frame_end= __shell_kernel_frame_fields= __shell_kernel_frame_field
  if [[ $1 == -l ]]; then __shell_kernel_frame_end=$'\n'; builtin shift; fi
  # Most frames have nothing to escape (an IFS that joins "$*" with one of
  # these bytes only sends them the long way): their fields in one printf.
  if [[ "$*" != *[%$'\n\r\036\037']* ]]; then
    builtin printf -v __shell_kernel_frame_fields '\037%s' "$@"
  else
    for __shell_kernel_frame_field in "$@"; do
      if [[ $__shell_kernel_frame_field == *[%$'\n\r\036\037']* ]]; then
        __shell_kernel_frame_field=${__shell_kernel_frame_field//[%]/%25}
        __shell_kernel_frame_field=${__shell_kernel_frame_field//$'\036'/%1E}
        __shell_kernel_frame_field=${__shell_kernel_frame_field//$'\037'/%1F}
        __shell_kernel_frame_field=${__shell_kernel_frame_field//$'\n'/%0A}
        __shell_kernel_frame_field=${__shell_kernel_frame_field//$'\r'/%0D}
      fi
      __shell_kernel_frame_fields+=$'\037'$__shell_kernel_frame_field
    done
  fi
  builtin printf '\036%s\037\036%s' "$__shell_kernel_frame_fields" "$__shell_kernel_frame_end"
}
