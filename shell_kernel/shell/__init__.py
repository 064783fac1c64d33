"""Shell code that the kernel runs in (session.bash) and beside (reap.sh) the shell."""
