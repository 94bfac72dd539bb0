"""rltrain policy pack: `pulumi preview --policy-pack policy` (rules in components/offline/policy.py)."""

from pack import PACK_NAME, policies
from pulumi_policy import PolicyPack

PolicyPack(name=PACK_NAME, policies=policies())
