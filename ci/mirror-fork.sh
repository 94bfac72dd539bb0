#!/usr/bin/env bash
# Mirror a fork's pull request to a branch of this repository, at the commit that was reviewed and never
# another: a maintainer's step before the real preview (docs/pr-review.md "Pull requests from forks").
#
#   ci/mirror-fork.sh PR_NUMBER HEAD_SHA      # from a clone of this repository ("origin"), on main
#
# HEAD_SHA is the commit the fork's review comment names, taken from GitHub (`workflow_run.head_sha`), not
# from the fork's text: the commit the maintainer read. The pull request's head is fetched
# (`refs/pull/N/head`, which GitHub keeps on the base repository) and compared with it: when the fork has
# pushed since (a force-push after the review), the script refuses and pushes nothing. Otherwise HEAD_SHA
# itself, not whatever the branch points at, is pushed to `pr-N` (never forced: an existing `pr-N` that is
# not an ancestor is refused by git), and the maintainer opens a pull request from `pr-N`; its preview
# waits for someone else's approval of the `preview` environment.
set -euo pipefail
usage="usage: ci/mirror-fork.sh PR_NUMBER HEAD_SHA"
number="${1:?$usage}"
sha="${2:?$usage}"
remote="${MIRROR_REMOTE:-origin}"
[[ "$number" =~ ^[0-9]+$ ]] || { echo "ci/mirror-fork.sh: ${number} is not a pull request number" >&2; exit 2; }
[[ "$sha" =~ ^[0-9a-f]{40}$ ]] || { echo "ci/mirror-fork.sh: ${sha} is not a full commit id (40 hex digits)" >&2; exit 2; }

git fetch --no-tags --quiet "$remote" "refs/pull/${number}/head"
fetched="$(git rev-parse FETCH_HEAD)"
if [ "$fetched" != "$sha" ]; then
  echo "REFUSED: #${number}'s head is now ${fetched}, not the reviewed ${sha}: the fork pushed after the review. Read the new commits, then mirror the head its new review comment names." >&2
  exit 1
fi
git push "$remote" "${sha}:refs/heads/pr-${number}"
echo "mirrored #${number} at ${sha:0:12} to pr-${number}: open a pull request from pr-${number}"
