#!/usr/bin/env bash
# shellcheck disable=SC2016  # backquotes are Markdown code spans here, not command substitution
# What this change does to each stack, judged against its base.
#
#   ci/render-review.sh [--base REV] [STACK...]    # every Pulumi.*.yaml stack by default
#
# The base: on a pull request's merge commit (what actions/checkout checks out for `pull_request`)
# its first parent, HEAD^1: the base branch as GitHub merged it. Never `origin/<base>` fetched when
# the job starts: a re-run reuses the merge commit but fetches current branch heads, so main's later
# changes would be blamed on the pull request (docs/pr-review.md "Sources"). Elsewhere (a
# laptop, not a merge commit) --base names it, e.g. `--base main`.
#
# Per stack, in Markdown: the impact table, the estimated cost before and after, the preflight result
# (secrets not set) and the policy and deploy-model rules; then the render diff against the base.
# "Before" is what the BASE's own program renders (ci/base_render.py on `git archive BASE`): when the
# base's committed record differs from it (someone merged without re-rendering), that difference is
# shown apart, as the base's ("... is stale: these changes are not this PR's"), and not blamed on the
# pull request. When this change's own rendered/ is not what its code renders, the summary says so and
# what to run, instead of "no change to rendered/" under a table of changes.
# A stack whose file this change leaves alone is rendered with --accept-impact: what it shows comes
# from the program itself, which reviewers accept (run restarts, node rolls; never data loss, which
# needs the stack's own opt-in); a changed stack file must opt in with its allow* keys.
#
# Writes $RLTRAIN_CI_OUT (default ci-out/): summary.md (appended to $GITHUB_STEP_SUMMARY when set),
# review.json (the commits it describes, the stale stacks, the exit code, PR_NUMBER when set: for the
# PR comment, ci/review-comment.sh),
# render-diff.patch, render.log, base/STACK/ (the base's committed records), base-render/STACK/ (the
# base program's render and cost), render/STACK/ (this change's render). Nothing under rendered/.
# Exit: 0; 1 when a stack's render refuses (impact, policy) or fails; 2 on an invalid stack config or
# no base.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

base_rev=""
if [ "${1:-}" = "--base" ]; then
  base_rev="${2:?usage: ci/render-review.sh [--base REV] [STACK...]}"
  shift 2
fi
merge=""
if git rev-parse --verify --quiet 'HEAD^2^{commit}' > /dev/null; then
  merge="$(git rev-parse HEAD)"
fi
if [ -z "$base_rev" ]; then
  if [ -z "$merge" ]; then
    echo "::error title=No base::HEAD is not a merge commit (a pull request's merge ref): name the base, e.g. ci/render-review.sh --base main" >&2
    exit 2
  fi
  base_rev='HEAD^1'
fi
if ! base="$(git rev-parse --verify --quiet "${base_rev}^{commit}")"; then
  echo "::error title=No base::${base_rev} is not a commit here (fetch it first, or fetch-depth: 0)" >&2
  exit 2
fi
# The commit this review describes: the pull request's head (HEAD^2 of the merge commit), else HEAD.
if [ -n "${PR_HEAD_SHA:-}" ]; then
  head_sha="$PR_HEAD_SHA"
elif [ -n "$merge" ]; then
  head_sha="$(git rev-parse 'HEAD^2')"
else
  head_sha="$(git rev-parse HEAD)"
fi
# How the base is named in the summary: the base branch (BASE_NAME, e.g. github.base_ref) or the revision.
label="${BASE_NAME:-$base_rev}"

out="$RLTRAIN_CI_OUT"
rm -rf "$out/base" "$out/base-render" "$out/judged" "$out/render"
mkdir -p "$out/base" "$out/base-render" "$out/judged" "$out/render"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

stacks=("$@")
if [ "${#stacks[@]}" -eq 0 ]; then
  for f in Pulumi.*.yaml; do
    s="${f#Pulumi.}"
    stacks+=("${s%.yaml}")
  done
fi

# The base's records, as committed there.
for s in "${stacks[@]}"; do
  if git cat-file -e "${base}:rendered/${s}/resources.json" 2>/dev/null; then
    mkdir -p "$out/base/$s"
    git show "${base}:rendered/${s}/resources.json" > "$out/base/$s/resources.json"
  fi
done

# The base's own program, rendered: its record and its cost.
mkdir -p "$tmp/base-tree"
git archive "$base" | tar -x -C "$tmp/base-tree"
if ! python ci/base_render.py "$tmp/base-tree" "$out/base-render" "${stacks[@]}" > "$out/base-render.log" 2>&1; then
  echo "warning: the base's own render failed: ci/base_render.py (see $out/base-render.log)" >&2
fi

# What each stack is judged against: the base program's render; its committed record when the base
# does not render here (said in the summary). The difference between the two is the base's drift.
drift_md="$tmp/drift.md"
: > "$drift_md"
stale_base=()
unjudged=()
for s in "${stacks[@]}"; do
  mkdir -p "$out/judged/$s"
  [ ! -f "$out/base-render/$s/cost.json" ] || cp "$out/base-render/$s/cost.json" "$out/judged/$s/"
  if [ -f "$out/base-render/$s/resources.json" ]; then
    cp "$out/base-render/$s/resources.json" "$out/judged/$s/"
    if [ -f "$out/base/$s/resources.json" ] && ! cmp -s "$out/base/$s/resources.json" "$out/base-render/$s/resources.json"; then
      stale_base+=("$s")
      {
        printf '### `%s`: the base'"'"'s drift\n\n' "$s"
        python ci/record_drift.py "$s" "$out/base/$s/resources.json" "$out/base-render/$s/resources.json"
      } >> "$drift_md"
    fi
  elif [ -f "$out/base/$s/resources.json" ]; then
    cp "$out/base/$s/resources.json" "$out/judged/$s/"
    unjudged+=("$s")
  fi
done

# This change, stack by stack.
stacks_md="$tmp/stacks.md"
: > "$stacks_md"
: > "$out/render.log"
worst=0
stale_pr=()
unchecked=()
for s in "${stacks[@]}"; do
  accept=()
  if git cat-file -e "${base}:Pulumi.${s}.yaml" 2>/dev/null && git diff --quiet "$base" -- "Pulumi.${s}.yaml"; then
    accept=(--accept-impact)
  fi
  before="$(wc -c < "$stacks_md")"
  rc=0
  python -m components.offline.render --stack "$s" --out "$out/render/$s" --base "$out/judged" \
    --summary-md "$stacks_md" "${accept[@]}" >> "$out/render.log" 2> "$tmp/stderr" || rc=$?
  cat "$tmp/stderr" >> "$out/render.log"
  if [ "$(wc -c < "$stacks_md")" -eq "$before" ]; then
    printf '### Stack `%s`\n\n' "$s" >> "$stacks_md"
  fi
  if [ "${#accept[@]}" -gt 0 ] && grep -q 'accepted (--accept-impact)' "$tmp/stderr"; then
    printf '> `Pulumi.%s.yaml` is unchanged, so the impact accepted above comes from the program itself: accepting it is for the reviewers.\n\n' "$s" >> "$stacks_md"
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
    unchecked+=("$s")
    continue
  fi
  # Is this change's committed record what its code renders?
  for file in resources.json manifests.yaml; do
    if ! cmp -s "$out/render/$s/$file" "rendered/$s/$file"; then
      stale_pr+=("$s")
      break
    fi
  done
done

# The render diff, as GitHub's "Files changed" shows it (against the merge base).
git diff "${base}...HEAD" -- rendered/ > "$out/render-diff.patch"

join() { local IFS=,; printf '%s' "$*" | sed 's/,/, /g'; }
{
  printf '## What this change does to each stack\n\n'
  printf 'Commit `%s`, judged against `%s` at `%s`%s: the impact against what the base'"'"'s own program renders, the cost before from the same render. ' \
    "$(git rev-parse --short "$head_sha")" "$label" "$(git rev-parse --short "$base")" \
    "${merge:+ (the first parent of the merge commit \`$(git rev-parse --short "$merge")\`)}"
  printf 'The full render diff is `render-diff.patch` in the `review` artifact and the "Files changed" tab.\n\n'
  if [ "${#stale_base[@]}" -gt 0 ]; then
    printf '## `%s` is stale: these changes are not this PR'"'"'s\n\n' "$label"
    printf 'The committed records of %s on `%s` are not what its own program renders. ' "$(join "${stale_base[@]}")" "$label"
    printf 'Below, per stack, what its record misses; the impact tables further down leave it out. '
    printf 'The render diff of this pull request against `%s` includes it once its author re-renders.\n\n' "$label"
    cat "$drift_md"
  fi
  if [ "${#unjudged[@]}" -gt 0 ]; then
    printf '> The base'"'"'s program does not render here for %s (see `base-render.log`): judged against its committed record, which may be stale.\n\n' \
      "$(join "${unjudged[@]}")"
  fi
  cat "$stacks_md"
  printf '### Render diff against `%s`\n\n' "$label"
  if [ "${#stale_pr[@]}" -gt 0 ]; then
    printf '**The committed `rendered/` of this change is stale** for %s: it is not what this commit'"'"'s code renders, ' "$(join "${stale_pr[@]}")"
    printf 'so the files below (and the "Files changed" tab) do not show the impact above. Re-render and commit:\n\n'
    for s in "${stale_pr[@]}"; do
      inherited=""
      if cmp -s "rendered/$s/resources.json" "$out/base/$s/resources.json" && [[ " ${stale_base[*]} " == *" $s "* ]]; then
        inherited=" (this change left the record as \`$label\` has it: the staleness is the base's, shown above)"
      fi
      printf -- '- `python -m components.offline.render --stack %s --accept-impact` (a change of the program; a changed `Pulumi.%s.yaml` opts in with its allow* keys instead)%s\n' "$s" "$s" "$inherited"
    done
    printf '\nthen `git add rendered/ && git commit`.\n\n'
  fi
  if [ "${#unchecked[@]}" -gt 0 ]; then
    printf 'Not compared with the committed `rendered/` (the render refused or failed): %s.\n\n' "$(join "${unchecked[@]}")"
  fi
  if [ -s "$out/render-diff.patch" ]; then
    printf '| file | lines added | lines removed |\n|---|---:|---:|\n'
    git diff --numstat "${base}...HEAD" -- rendered/ | awk -F '\t' '{ printf "| `%s` | %s | %s |\n", $3, $1, $2 }'
  elif [ "${#stale_pr[@]}" -eq 0 ] && [ "${#unchecked[@]}" -eq 0 ]; then
    printf 'No change to `rendered/`: no Kubernetes object or AWS resource of any stack changes.\n'
  else
    printf 'The committed `rendered/` does not change, but see above: it is not what the code renders.\n'
  fi
} > "$out/summary.md"

python3 - "$out/review.json" "$head_sha" "$base" "$merge" "$label" "$worst" \
  "$(join "${stale_base[@]}")" "$(join "${stale_pr[@]}")" "${PR_NUMBER:-}" <<'PY'
import json, sys
path, head, base, merge, label, worst, stale_base, stale_pr, pr = sys.argv[1:]
split = lambda s: [x for x in s.split(", ") if x]
json.dump({"head_sha": head, "base_sha": base, "merge_sha": merge or None, "base": label, "exit": int(worst),
           "stale_base": split(stale_base), "stale_record": split(stale_pr), "pr_number": pr or None},
          open(path, "w"), indent=2)
PY

if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
echo "wrote $out/summary.md, $out/review.json, $out/render-diff.patch (exit $worst)"
exit "$worst"
