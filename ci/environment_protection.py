"""Is a GitHub environment protected by required reviewers? The credentials gate's check
(ci/preview-gate.sh), so that a missing approval fails closed instead of handing the environment's
secrets to whatever code the run checked out.

    gh api repos/OWNER/REPO/environments/NAME | python3 ci/environment_protection.py NAME

Reads the REST API's environment ("Get an environment",
https://docs.github.com/en/rest/deployments/environments#get-an-environment: `protection_rules`, each
with a `type`; `required_reviewers` carries `reviewers` and `prevent_self_review`; `can_admins_bypass`).
Why it is needed: on GitHub Free, Pro and Team, required reviewers exist only in public repositories
(https://docs.github.com/en/actions/managing-workflow-runs-and-deployments/managing-deployments/reviewing-deployments,
"Who can use this feature?"): in a private repository on those plans the environment runs every job at
once, with its secrets. Admins bypass the rules unless "Allow administrators to bypass configured
protection rules" is off.

Exit 0 and `protected: ...` when a required-reviewers rule names at least one reviewer (with a
`warning:` line per weaker setting: admins may bypass, self-review allowed); exit 1 and `not protected:
...` otherwise (no such rule, no reviewer, not JSON). Standard library only.
"""

from __future__ import annotations

import json
import sys


def verdict(name: str, text: str) -> tuple[bool, list[str]]:
    try:
        env = json.loads(text)
    except ValueError:
        return False, [f"not protected: the environment `{name}` could not be read (not JSON: {text[:120]!r})"]
    if not isinstance(env, dict) or env.get("name") != name:
        return False, [f"not protected: no environment `{name}` in this repository"]
    rules = [r for r in env.get("protection_rules") or [] if isinstance(r, dict)]
    reviewers = [r for rule in rules if rule.get("type") == "required_reviewers" for r in rule.get("reviewers") or []]
    if not reviewers:
        return False, [f"not protected: the environment `{name}` has no required reviewers (on GitHub Free, Pro "
                       "and Team they exist only in public repositories): any run would get its secrets "
                       "without an approval"]
    lines = [f"protected: the environment `{name}` needs an approval by one of {len(reviewers)} reviewer(s)"]
    if env.get("can_admins_bypass", True):
        lines.append(f"warning: administrators may bypass `{name}`'s protection rules (turn off \"Allow "
                     "administrators to bypass configured protection rules\")")
    if not any(rule.get("prevent_self_review") for rule in rules if rule.get("type") == "required_reviewers"):
        lines.append(f"warning: `{name}` lets the author of a run approve it (turn on \"Prevent self-review\")")
    return True, lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: gh api repos/OWNER/REPO/environments/NAME | python3 ci/environment_protection.py NAME",
              file=sys.stderr)
        return 2
    ok, lines = verdict(argv[0], sys.stdin.read())
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
