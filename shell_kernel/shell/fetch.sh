# shell_kernel: hand over a payload file the shell wrote (a display's or a
# query's bytes) and remove it. POSIX sh.   fetch.sh FILE
cat -- "$1" && rm -f -- "$1"
