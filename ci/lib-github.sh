# shellcheck shell=bash
# Sourced by the preview scripts: GitHub Actions outputs and annotations, printed when run elsewhere.

# output NAME VALUE: a step output ($GITHUB_OUTPUT), or a line on stdout outside GitHub Actions.
output() {
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    printf '%s=%s\n' "$1" "$2" >> "$GITHUB_OUTPUT"
  fi
  printf '%s=%s\n' "$1" "$2"
}

# notice TITLE MESSAGE: a notice annotation, and a paragraph of the job summary.
notice() {
  printf '::notice title=%s::%s\n' "$1" "$2"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    printf '### %s\n\n%s\n\n' "$1" "$2" >> "$GITHUB_STEP_SUMMARY"
  fi
}

# stack_ref STACK: the stack as the backend names it. Pulumi Cloud: ORG/STACK with the repository
# variable PULUMI_ORG (else the token's default organization); a self-managed backend: STACK.
stack_ref() {
  case "${PULUMI_BACKEND_URL:-}" in
    "" | https://* | http://*) printf '%s%s\n' "${PULUMI_ORG:+$PULUMI_ORG/}" "$1" ;;
    *) printf '%s\n' "$1" ;;
  esac
}
