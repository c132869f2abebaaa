# BASH_ENV of a container's `bash -c COMMAND`: puts the platform's launcher wrappers first on
# PATH without replacing the image's own PATH (which the container's environment cannot extend).
case ":$PATH:" in
  *":$SIMPLEAI_LAUNCHERS:"*) ;;
  *) PATH="$SIMPLEAI_LAUNCHERS:$PATH"; export PATH ;;
esac
# the programs of the project's requirements.txt (installed for the image: PYTHONUSERBASE), after the image's own
if [ -n "${PYTHONUSERBASE:-}" ] && [ -d "$PYTHONUSERBASE/bin" ]; then
  case ":$PATH:" in
    *":$PYTHONUSERBASE/bin:"*) ;;
    *) PATH="$PATH:$PYTHONUSERBASE/bin"; export PATH ;;
  esac
fi
unset BASH_ENV
