#!/bin/sh
# sudo-double.sh is a TEST DOUBLE standing in for `sudo -n` as a node's
# clear_helper: it appends its argv (one per line, then a "--end--" line) to
# $SUDO_DOUBLE_LOG, drops leading options as sudo does (-n), and runs the
# rest as the calling user. Tests use it to prove exactly which command the
# helper path runs.
for a in "$@"; do printf '%s\n' "$a" >> "$SUDO_DOUBLE_LOG"; done
printf -- '--end--\n' >> "$SUDO_DOUBLE_LOG"
while [ $# -gt 0 ]; do
	case "$1" in -*) shift ;; *) break ;; esac
done
exec "$@"
