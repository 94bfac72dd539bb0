#!/usr/bin/env bash
# shellcheck disable=SC2016  # backquotes are Markdown code spans here, not command substitution
# What this change does to each stack, judged against a base commit (a pull request's base branch).
#
#   ci/render-review.sh BASE_REF [STACK...]   # BASE_REF e.g. main (tried as given, then as origin/BASE_REF,
#                                             # fetched if missing); every Pulumi.*.yaml stack by default
#
# Per stack, in Markdown: the impact table against the base's committed records
# (rendered/STACK/resources.json at BASE_REF), the estimated cost before (the base commit's own render,
# ci/base_cost.py) and after, the preflight result (secrets not set) and the policy and deploy-model
# rules; then the render diff against the base, whose full patch is a file beside it.
# A stack whose file this change leaves alone is rendered with --accept-impact: what it shows comes
# from the program itself, which reviewers accept in the review (docs/review-flow.md); a
# changed stack file must opt in with its allow* keys.
#
# Writes $RLTRAIN_CI_OUT (default ci-out/): summary.md (appended to $GITHUB_STEP_SUMMARY when set),
# render-diff.patch, render.log, base/STACK/ (the base's records and cost), render/STACK/ (this
# change's render). Nothing under rendered/. Exit: 0; 1 when a stack's render refuses (impact,
# policy) or fails; 2 on an invalid stack config.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

ref="${1:?usage: ci/render-review.sh BASE_REF [STACK...]}"
shift
if base="$(git rev-parse --verify --quiet "${ref}^{commit}")"; then
  :
elif base="$(git rev-parse --verify --quiet "origin/${ref}^{commit}")"; then
  ref="origin/${ref}"
else
  git fetch --no-tags --quiet origin "+refs/heads/${ref}:refs/remotes/origin/${ref}"
  ref="origin/${ref}"
  base="$(git rev-parse --verify "${ref}^{commit}")"
fi

out="$RLTRAIN_CI_OUT"
rm -rf "$out/base" "$out/render"
mkdir -p "$out/base" "$out/render"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

stacks=("$@")
if [ "${#stacks[@]}" -eq 0 ]; then
  for f in Pulumi.*.yaml; do
    s="${f#Pulumi.}"
    stacks+=("${s%.yaml}")
  done
fi

# The base's records, as committed there: what the impact is judged against.
for s in "${stacks[@]}"; do
  if git cat-file -e "${base}:rendered/${s}/resources.json" 2>/dev/null; then
    mkdir -p "$out/base/$s"
    git show "${base}:rendered/${s}/resources.json" > "$out/base/$s/resources.json"
  fi
done

# The base's cost, from the base commit's own render (the records hold no cost).
mkdir -p "$tmp/base-tree"
git archive "$base" | tar -x -C "$tmp/base-tree"
if ! python ci/base_cost.py "$tmp/base-tree" "$out/base" "${stacks[@]}" > "$out/base-cost.log" 2>&1; then
  echo "warning: the cost before is unknown: ci/base_cost.py failed (see $out/base-cost.log)" >&2
fi

# This change, stack by stack.
stacks_md="$tmp/stacks.md"
: > "$stacks_md"
: > "$out/render.log"
worst=0
for s in "${stacks[@]}"; do
  accept=()
  if git cat-file -e "${base}:Pulumi.${s}.yaml" 2>/dev/null && git diff --quiet "$base" -- "Pulumi.${s}.yaml"; then
    accept=(--accept-impact)
  fi
  before="$(wc -c < "$stacks_md")"
  rc=0
  python -m components.offline.render --stack "$s" --out "$out/render/$s" --base "$out/base" \
    --summary-md "$stacks_md" "${accept[@]}" >> "$out/render.log" 2> "$tmp/stderr" || rc=$?
  cat "$tmp/stderr" >> "$out/render.log"
  if [ "$(wc -c < "$stacks_md")" -eq "$before" ]; then
    printf '### Stack `%s`\n\n' "$s" >> "$stacks_md"
  fi
  if grep -q 'accepted (--accept-impact)' "$tmp/stderr"; then
    {
      printf '> Not refused: `Pulumi.%s.yaml` is unchanged, so this impact comes from the program itself ' "$s"
      printf '(rendered with `--accept-impact`, as its author did); accepting it is for the reviewers:\n'
      grep 'accepted (--accept-impact)' "$tmp/stderr" | sed 's/^.*accepted (--accept-impact): /> - /'
      printf '\n'
    } >> "$stacks_md"
  fi
  if [ "$rc" -ne 0 ]; then
    {
      case "$rc" in
        2) printf '**Invalid stack config** (exit 2): nothing rendered.\n\n' ;;
        1) printf '**Refused** (exit 1): this change needs an opt-in the stack does not set, or breaks a rule.\n\n' ;;
        *) printf '**The render failed** (exit %s).\n\n' "$rc" ;;
      esac
      printf '```text\n'
      grep -v '^ *$' "$tmp/stderr" | tail -n 60 | sed 's/```/`` `/g'
      printf '```\n\n'
    } >> "$stacks_md"
    [ "$rc" -le "$worst" ] || worst="$rc"
  fi
done

# The render diff, as GitHub's "Files changed" shows it (against the merge base).
git diff "${base}...HEAD" -- rendered/ > "$out/render-diff.patch"

{
  printf '## What this change does to each stack\n\n'
  printf 'Judged against `%s` (`%s`): the impact against its committed records, the cost before from its own render. ' \
    "$ref" "$(git rev-parse --short "$base")"
  printf 'The full render diff is the `render-diff` artifact and the "Files changed" tab.\n\n'
  cat "$stacks_md"
  printf '### Render diff against `%s`\n\n' "$ref"
  if [ -s "$out/render-diff.patch" ]; then
    printf '| file | lines added | lines removed |\n|---|---:|---:|\n'
    git diff --numstat "${base}...HEAD" -- rendered/ | awk -F '\t' '{ printf "| `%s` | %s | %s |\n", $3, $1, $2 }'
  else
    printf 'No change to `rendered/`: no Kubernetes object or AWS resource of any stack changes.\n'
  fi
} > "$out/summary.md"

if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
echo "wrote $out/summary.md, $out/render-diff.patch (exit $worst)"
exit "$worst"
