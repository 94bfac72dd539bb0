"""rltrain policy pack: `pulumi preview --policy-pack policy` (rules in components/offline/policy.py)."""

from pack import policies
from pulumi_policy import PolicyPack

PolicyPack(name="rltrain-guardrails", policies=policies())
