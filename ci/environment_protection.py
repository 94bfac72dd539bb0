"""May this run use the environment's credentials? The credentials gate's check (ci/preview-gate.sh): the
environment is set up so that only an approval lets a run in, AND this very run was approved by someone
else. Anything less fails closed.

    python3 ci/environment_protection.py NAME --environment ENV.json --approvals APPROVALS.json \
        [--branch main --branch-policies POLICIES.json] [--not-by LOGIN ...]

ENV.json: `gh api repos/OWNER/REPO/environments/NAME` (REST "Get an environment",
https://docs.github.com/en/rest/deployments/environments#get-an-environment: `protection_rules`, each with a
`type`; `required_reviewers` carries `reviewers` and `prevent_self_review`; `can_admins_bypass`;
`deployment_branch_policy`, null for "all branches", else `protected_branches` / `custom_branch_policies`).
APPROVALS.json: `gh api repos/OWNER/REPO/actions/runs/RUN_ID/approvals` (REST "Get the review history for
a workflow run", https://docs.github.com/en/rest/actions/workflow-runs#get-the-review-history-for-a-workflow-run:
a list of reviews, each with `state` approved/rejected/pending, `environments` (each with its `name`), the
reviewing `user`). POLICIES.json: `gh api repos/OWNER/REPO/environments/NAME/deployment-branch-policies`
(REST "List deployment branch policies", https://docs.github.com/en/rest/deployments/branch-policies:
`branch_policies`, each a `name` pattern and a `type`, branch or tag).

The environment must have:
1. a required-reviewers rule naming at least one reviewer (on GitHub Free, Pro and Team they exist only in
   public repositories:
   https://docs.github.com/en/actions/managing-workflow-runs-and-deployments/managing-deployments/reviewing-deployments);
2. administrators unable to bypass it (`can_admins_bypass` false: "Allow administrators to bypass configured
   protection rules" off; on by default, and a bypass leaves no approval);
3. "Prevent self-review" on (`prevent_self_review`);
4. with --branch: deployments only from that branch (`custom_branch_policies` with exactly one policy, the
   branch itself, no pattern), so that no other branch's workflow reaches its secrets.
And this run must have an approval (`state` approved) of NAME by someone other than each --not-by login (the
pull request's author, whoever triggered the run): the environment's configuration can change between the
approval and the job, an approval cannot be made by the run itself.

Exit 0 and `protected: ...` when all hold; exit 1 and one `not protected: ...` line per failure otherwise.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional


def _load(text: str, what: str) -> tuple[Any, Optional[str]]:
    try:
        return json.loads(text), None
    except ValueError:
        return None, f"{what} could not be read (not JSON: {text[:120]!r})"


def configuration(name: str, env: Any, branch: Optional[str] = None, policies: Any = None) -> list[str]:
    """What is wrong with the environment's settings (empty: nothing)."""
    if not isinstance(env, dict) or env.get("name") != name:
        return [f"no environment `{name}` in this repository"]
    problems = []
    rules = [r for r in env.get("protection_rules") or [] if isinstance(r, dict)]
    reviewer_rules = [r for r in rules if r.get("type") == "required_reviewers"]
    if not [r for rule in reviewer_rules for r in rule.get("reviewers") or []]:
        problems.append(f"the environment `{name}` has no required reviewers (on GitHub Free, Pro and Team they "
                        "exist only in public repositories): any run would get its secrets without an approval")
    if env.get("can_admins_bypass", True):
        problems.append(f"administrators may bypass `{name}`'s protection rules, and a bypass leaves no approval "
                        "(turn off \"Allow administrators to bypass configured protection rules\")")
    if not any(rule.get("prevent_self_review") is True for rule in reviewer_rules):
        problems.append(f"`{name}` lets whoever triggered a run approve it (turn on \"Prevent self-review\")")
    if branch is not None:
        policy = env.get("deployment_branch_policy")
        names = sorted((p.get("name"), p.get("type", "branch")) for p in (policies or {}).get("branch_policies") or []
                       if isinstance(p, dict)) if isinstance(policies, dict) else None
        if not isinstance(policy, dict) or not policy.get("custom_branch_policies") or policy.get("protected_branches"):
            problems.append(f"`{name}` accepts deployments from {'every branch' if policy is None else 'every protected branch'}: "
                            f"set its deployment branches to `{branch}` only (selected branches, one rule `{branch}`)")
        elif names != [(branch, "branch")]:
            shown = ", ".join(f"{t} `{n}`" for n, t in names or []) or "none readable"
            problems.append(f"`{name}`'s deployment branch rules are {shown}: only the branch `{branch}` may deploy")
    return problems


def approval(name: str, approvals: Any, not_by: set[str]) -> tuple[Optional[str], Optional[str]]:
    """(approver, None) when this run was approved for NAME by someone not in not_by; else (None, why)."""
    if not isinstance(approvals, list):
        return None, "this run's approvals could not be read"
    approved = [a for a in approvals if isinstance(a, dict) and a.get("state") == "approved"
                and name in [e.get("name") for e in a.get("environments") or [] if isinstance(e, dict)]]
    others = [a for a in approved if str((a.get("user") or {}).get("login") or "").lower() not in not_by]
    if others:
        return str(others[0]["user"]["login"]), None
    if approved:
        logins = sorted({str((a.get("user") or {}).get("login")) for a in approved})
        return None, (f"this run's approval of `{name}` is by {', '.join(logins)}, who opened the pull request or "
                      "triggered the run: someone else must approve")
    return None, f"this run has no approval of `{name}` (an administrator's bypass, or no reviewer)"


def verdict(name: str, env_text: str, approvals_text: str, branch: Optional[str] = None,
            policies_text: Optional[str] = None, not_by: tuple[str, ...] = ()) -> tuple[bool, list[str]]:
    env, bad = _load(env_text, f"the environment `{name}`")
    if bad:
        return False, [f"not protected: {bad}"]
    policies = None
    if branch is not None:
        policies, bad = _load(policies_text or "", f"`{name}`'s deployment branch policies")
        if bad:
            return False, [f"not protected: {bad}"]
    problems = configuration(name, env, branch, policies)
    approvals, bad = _load(approvals_text, "this run's approvals")
    who, why = approval(name, approvals, {n.lower() for n in not_by if n}) if not bad else (None, bad)
    if why:
        problems.append(why)
    if problems:
        return False, [f"not protected: {p}" for p in problems]
    reviewers = sum(len(r.get("reviewers") or []) for r in env.get("protection_rules") or []
                    if isinstance(r, dict) and r.get("type") == "required_reviewers")
    where = f", deployments from `{branch}` only" if branch else ""
    return True, [f"protected: the environment `{name}` needs an approval by one of {reviewers} reviewer(s), no "
                  f"administrator bypass, no self-review{where}; this run was approved by {who}"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ci/environment_protection.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--environment", type=Path, required=True)
    ap.add_argument("--approvals", type=Path, required=True)
    ap.add_argument("--branch")
    ap.add_argument("--branch-policies", type=Path)
    ap.add_argument("--not-by", action="append", default=[])
    args = ap.parse_args(argv)
    if args.branch and not args.branch_policies:
        ap.error("--branch needs --branch-policies")
    ok, lines = verdict(args.name, args.environment.read_text(), args.approvals.read_text(), args.branch,
                        args.branch_policies.read_text() if args.branch_policies else None, tuple(args.not_by))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
