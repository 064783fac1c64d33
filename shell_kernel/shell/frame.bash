# shell_kernel: how the bash code beside and inside the user's shell writes
# a frame. Put into session.bash and prompts.bash where they say
# "#include frame.bash" (see __init__.py).
#
# __shell_kernel_frame [-l] TOKEN KIND [FIELD...] writes
#     \036\037TOKEN\037KIND\037FIELD...\037\036
# (with -l, and a newline) to standard output in one write, so that output
# printed at the same moment can neither split the frame nor mix into it.
# Spelled for the user's shell: builtins only (a user's printf function is
# not called), quoted "$@" (IFS and globbing change nothing), locals named as
# the kernel's own (no user variable, even a readonly one, is touched).
__shell_kernel_frame() {
  builtin local __shell_kernel_frame_end= __shell_kernel_frame_fields
  if [[ $1 == -l ]]; then __shell_kernel_frame_end=$'\n'; builtin shift; fi
  builtin printf -v __shell_kernel_frame_fields '\037%s' "$@"
  builtin printf '\036%s\037\036%s' "$__shell_kernel_frame_fields" "$__shell_kernel_frame_end"
}
