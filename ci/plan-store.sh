#!/usr/bin/env bash
# The reviewed update plans, kept where only the approved preview can write them and the deploy reads them.
#
#   ci/plan-store.sh put STACK           # the preview job, after ci/preview.sh: env PLAN_STORE_URL, RUN_ID,
#                                        # PR_NUMBER, HEAD_SHA; reads $RLTRAIN_CI_OUT/plan-STACK.json and .meta
#   ci/plan-store.sh get STACK RUN DIR   # the deploy (ci/deploy.sh): env PLAN_STORE_URL; writes
#                                        # DIR/plan-STACK.json and DIR/plan-STACK.meta
#
# PLAN_STORE_URL (a repository variable): s3://BUCKET/PREFIX, written with the preview role and read with
# the deploy role (IAM: the preview role may s3:PutObject under PREFIX/, the deploy role only s3:GetObject,
# no one else either: docs/pr-review.md "What the role needs"), or file:///DIR for the tests. A plan lives
# at PLAN_STORE_URL/STACK/run-RUN/plan.json with plan.meta beside it: the meta ci/preview.sh wrote
# (stack, the commit and tree the plan was made on) and what `put` adds from the workflow (run=, pr=,
# head=). Nothing a job without the preview role's credentials runs can write there, unlike an artifact,
# which any job of the run can upload under any name first (artifact names are unique per run: the
# approved preview's own upload would then fail).
#
# `put` without a plan (the preview failed or was skipped) or without a store keeps nothing and says so; `get` exits 1 when
# the run kept no plan for the stack.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"

usage="usage: ci/plan-store.sh put STACK | get STACK RUN DIR"
op="${1:?$usage}"
stack="${2:?$usage}"
store="${PLAN_STORE_URL:-}"
[[ "$stack" =~ ^[a-z0-9][a-z0-9-]*$ ]] || { echo "ci/plan-store.sh: bad stack name ${stack}" >&2; exit 2; }

copy() {  # copy SRC DST: one object, either side a store URL or a local file
  case "$1 $2" in
    s3://*|*" s3://"*) aws s3 cp --only-show-errors "$1" "$2" ;;
    *)
      local src="${1#file://}" dst="${2#file://}"
      mkdir -p "$(dirname "$dst")"
      cp "$src" "$dst"
      ;;
  esac
}

case "$store" in
  s3://* | file:///*) ;;
  "")
    why="PLAN_STORE_URL is not set (the repository variable naming the plan store: docs/pr-review.md \"Setting it up\")"
    if [ "$op" = put ]; then
      notice "No update plan kept for ${stack}" "${why}: a merge of this pull request deploys nothing to ${stack}."
      exit 0
    fi
    echo "ci/plan-store.sh: ${why}" >&2
    exit 1
    ;;
  *) echo "ci/plan-store.sh: PLAN_STORE_URL ${store} is neither s3:// nor file:///" >&2; exit 2 ;;
esac

case "$op" in
  put)
    run="${RUN_ID:?RUN_ID not set (github.run_id)}"
    plan="$RLTRAIN_CI_OUT/plan-${stack}.json"
    meta="$RLTRAIN_CI_OUT/plan-${stack}.meta"
    if [ ! -s "$plan" ] || [ ! -f "$meta" ]; then
      notice "No update plan kept for ${stack}" "The preview of ${stack} saved no plan (it failed or was skipped): a merge of this pull request deploys nothing to ${stack}."
      exit 0
    fi
    full="$(mktemp)"
    trap 'rm -f "$full"' EXIT
    { cat "$meta"; printf 'run=%s\npr=%s\nhead=%s\n' "$run" "${PR_NUMBER:-}" "${HEAD_SHA:-}"; } > "$full"
    copy "$plan" "${store%/}/${stack}/run-${run}/plan.json"
    copy "$full" "${store%/}/${stack}/run-${run}/plan.meta"
    echo "kept the plan of ${stack} (run ${run}) at ${store%/}/${stack}/run-${run}/"
    ;;
  get)
    run="${3:?$usage}"
    dir="${4:?$usage}"
    [[ "$run" =~ ^[0-9]+$ ]] || { echo "ci/plan-store.sh: run ${run} is not a run id" >&2; exit 2; }
    mkdir -p "$dir"
    rm -f "$dir/plan-${stack}.json" "$dir/plan-${stack}.meta"
    if ! copy "${store%/}/${stack}/run-${run}/plan.json" "$dir/plan-${stack}.json" 2>/dev/null ||
      ! copy "${store%/}/${stack}/run-${run}/plan.meta" "$dir/plan-${stack}.meta" 2>/dev/null; then
      rm -f "$dir/plan-${stack}.json" "$dir/plan-${stack}.meta"
      echo "run ${run} kept no plan for ${stack} in ${store}" >&2
      exit 1
    fi
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
