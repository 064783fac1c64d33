# shell_kernel: where the shell runs, put into session.bash where it says
# "#include where.bash" (see __init__.py).
#
# For a notebook job's record (provenance.py): the user, the host's name and
# the os as `uname -srm` says it, read from the files uname reads (no fork),
# or from uname where there are none; into __shell_kernel_where_user, _host
# and _os. A `run --hosts` session calls it for its ready frame, `run` with
# provenance.PROBE.
__shell_kernel_where() {
  builtin local __shell_kernel_where_s __shell_kernel_where_r __shell_kernel_where_m
  if [[ -z ${SHELL_KERNEL_NO_PROC-} ]] \
      && { builtin read -r __shell_kernel_where_s < /proc/sys/kernel/ostype \
           && builtin read -r __shell_kernel_where_r < /proc/sys/kernel/osrelease \
           && builtin read -r __shell_kernel_where_m < /proc/sys/kernel/arch; } 2>/dev/null; then
    __shell_kernel_where_os="$__shell_kernel_where_s $__shell_kernel_where_r $__shell_kernel_where_m"
  else
    __shell_kernel_where_os=$(builtin command uname -srm 2>/dev/null)
  fi
  __shell_kernel_where_user=${USER:-${LOGNAME:-$(builtin command id -un 2>/dev/null)}}
  __shell_kernel_where_host=${HOSTNAME-}
}
