# BASH_ENV of a container's `bash -c COMMAND`: puts the platform's launcher wrappers first on
# PATH without replacing the image's own PATH (which the container's environment cannot extend).
case ":$PATH:" in
  *":$SIMPLEAI_LAUNCHERS:"*) ;;
  *) PATH="$SIMPLEAI_LAUNCHERS:$PATH"; export PATH ;;
esac
unset BASH_ENV
