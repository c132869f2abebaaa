# Shared by the platform's launcher wrappers (sourced, not run).
# This directory comes off PATH: the real launcher, and everything it starts, find the
# training environment's own programs.
_simpleai_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PATH="$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$_simpleai_here" | paste -sd: -)"
export PATH

# `real_launcher NAME`: the training environment's own NAME.
real_launcher() {
  command -v "$1" || {
    echo "$1: not found in this job's training environment (choose a framework version that installs it)" >&2
    exit 127
  }
}

# `has_option "NAME..." ARGS...`: true when one of the space-separated NAMES (e.g. --hostfile)
# is among the launcher's own options in ARGS, i.e. before the training script (the first
# argument ending in .py).
has_option() {
  local names="$1" arg name
  shift
  for arg in "$@"; do
    case "$arg" in *.py) return 1 ;; esac
    for name in $names; do
      case "$arg" in "$name" | "$name"=*) return 0 ;; esac
    done
  done
  return 1
}

# `option_value NAME ARGS...`: the value of the launcher's own option NAME in ARGS (`NAME V` or
# `NAME=V`, before the training script), or nothing.
option_value() {
  local name="$1" arg take=""
  shift
  for arg in "$@"; do
    case "$arg" in *.py) return 0 ;; esac
    if [ -n "$take" ]; then
      printf '%s' "$arg"
      return 0
    fi
    case "$arg" in "$name") take=1 ;; "$name"=*) printf '%s' "${arg#*=}"; return 0 ;; esac
  done
}
