"""The rendered EC2NodeClass, NodePool and NodeOverlay of p5-elastic against the CRDs of
aws/karpenter-provider-aws v1.14.0 (pkg/apis/crds/: its NodePool and NodeOverlay CRDs are
sigs.k8s.io/karpenter v1.14.0's plus the karpenter.k8s.aws label rules), unknown fields refused.

The CRDs are read from the module tree cluster/build.sh names (RLTRAIN_SIM_KARPENTER_AWS_DIR) or
the Go module cache; without either the test is skipped, except under CI (env CI set), where it
fails. jsonschema checks the openAPIV3Schema (types, enums, patterns, bounds, required); the CEL
rules (x-kubernetes-validations) it cannot evaluate: the ones on the fields the stack sets are
checked here by hand, each quoted by its message.
"""

import copy
import os
from pathlib import Path

import jsonschema
import pytest
from support import obj, rendered

VERSION = "v1.14.0"
GO_CACHE = Path(os.environ.get("GOMODCACHE", "/root/go/pkg/mod")) / f"github.com/aws/karpenter-provider-aws@{VERSION}"
CRDS = {"EC2NodeClass": "karpenter.k8s.aws_ec2nodeclasses.yaml", "NodePool": "karpenter.sh_nodepools.yaml",
        "NodeOverlay": "karpenter.sh_nodeoverlays.yaml"}
NAMES = {"EC2NodeClass": "rltrain-gpu", "NodePool": "rltrain-gpu", "NodeOverlay": "rltrain-gpu-hugepages"}
# What the render cannot know (ids created on deploy), as values of the shape AWS gives them.
DEPLOY_VALUES = {("subnetSelectorTerms", "id"): "subnet-0123456789abcdef0",
                 ("securityGroupSelectorTerms", "id"): "sg-0123456789abcdef0", ("role",): "rltrain-p5-elastic-node"}


def _crd_dir() -> Path:
    for d in (os.environ.get("RLTRAIN_SIM_KARPENTER_AWS_DIR"), str(GO_CACHE)):
        if d and (Path(d) / "pkg/apis/crds").is_dir():
            return Path(d) / "pkg/apis/crds"
    reason = (f"no karpenter-provider-aws {VERSION} module tree: set RLTRAIN_SIM_KARPENTER_AWS_DIR "
              "(cluster/build.sh env.sh) or download it into the Go module cache")
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _strict(schema):
    """The CRD schema with unknown fields refused (an object with properties and no
    additionalProperties / preserve-unknown-fields): the API server's strict field validation."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items() if k != "properties"}
        if "properties" in schema:
            out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
            if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
                out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


def _schema(kind: str) -> tuple[str, dict]:
    import yaml
    crd = yaml.safe_load((_crd_dir() / CRDS[kind]).read_text())
    served = [v for v in crd["spec"]["versions"] if v.get("storage")]
    assert len(served) == 1
    return served[0]["name"], _strict(served[0]["schema"]["openAPIV3Schema"])


def _deployed(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    spec = doc["spec"]
    for path, value in DEPLOY_VALUES.items():
        if len(path) == 1:
            if str(spec.get(path[0], "")).startswith("[known after deploy"):
                spec[path[0]] = value
            continue
        for term in spec.get(path[0], []):
            if str(term.get(path[1], "")).startswith("[known after deploy"):
                term[path[1]] = value
    if isinstance(spec.get("userData"), list):  # the record's lines of a multi-line string
        spec["userData"] = "\n".join(spec["userData"])
    return doc


@pytest.fixture(scope="module")
def docs():
    r = rendered("p5-elastic")
    return {kind: _deployed(obj(r, kind, name)) for kind, name in NAMES.items()}


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_rendered_object_is_valid_against_the_crd(docs, kind):
    version, schema = _schema(kind)
    doc = docs[kind]
    assert doc["apiVersion"].rsplit("/", 1)[-1] == version
    jsonschema.validate(doc, schema)
    assert "[known after deploy" not in str(doc)


def test_schema_refuses_an_unknown_field(docs):
    _, schema = _schema("EC2NodeClass")
    bad = copy.deepcopy(docs["EC2NodeClass"])
    bad["spec"]["networkInterfaces"][0]["type"] = "efa"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = copy.deepcopy(docs["EC2NodeClass"])
    bad["spec"]["networkInterfaces"][0]["interfaceType"] = "efa"  # not in the v1.14.0 enum
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_ec2nodeclass_cel_rules(docs):
    spec = docs["EC2NodeClass"]["spec"]
    nics = spec["networkInterfaces"]
    # "networkInterfaces must include a primary interface with interfaceType='interface'"
    assert any(n["networkCardIndex"] == 0 and n["deviceIndex"] == 0 and n["interfaceType"] == "interface" for n in nics)
    # "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have
    # at most one efa device per network card"
    pairs = [(n["networkCardIndex"], n["deviceIndex"]) for n in nics]
    assert len(pairs) == len(set(pairs))
    efa_cards = [n["networkCardIndex"] for n in nics if n["interfaceType"] == "efa-only"]
    assert len(efa_cards) == len(set(efa_cards))
    # "must specify exactly one of ['role', 'instanceProfile']"
    assert ("role" in spec) != ("instanceProfile" in spec)
    # alias: "must match the format 'family@version'", family al2023; no amiFamily beside it
    alias = spec["amiSelectorTerms"][0]["alias"]
    assert alias.split("@")[0] == "al2023" and "@" in alias and len(alias) <= 30 and "amiFamily" not in spec
    # "'name' and 'id' are mutually exclusive" (placementGroupSelector)
    assert len(spec["placementGroupSelector"]) == 1
    # "must have only one blockDeviceMappings with rootVolume"
    assert sum(1 for b in spec["blockDeviceMappings"] if b.get("rootVolume")) == 1


def test_nodepool_and_overlay_cel_rules(docs):
    pool = docs["NodePool"]["spec"]
    restricted = ("kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.k8s.aws")
    # template labels: 'label domain "kubernetes.io" is restricted' (and the others)
    for key in pool["template"]["metadata"]["labels"]:
        domain = key.split("/")[0] if "/" in key else ""
        assert not any(domain == d or domain.endswith("." + d) for d in restricted), key
    # requirements: well-known labels only in their own domains, operator In with values
    for r in pool["template"]["spec"]["requirements"]:
        assert r["operator"] == "In" and r["values"]
    # NodeOverlay capacity: "invalid resource restricted" (cpu, memory, ephemeral-storage, pods)
    assert not set(docs["NodeOverlay"]["spec"]["capacity"]) & {"cpu", "memory", "ephemeral-storage", "pods"}


@pytest.mark.parametrize("kind", ["EC2NodeClass", "NodePool"])
def test_cpu_node_pool_and_class_are_valid_against_the_crd(kind):
    """The elastic stack's CPU NodePool (issue 44 item 2) and its node class."""
    version, schema = _schema(kind)
    doc = _deployed(obj(rendered("p5-elastic"), kind, "rltrain-cpu"))
    jsonschema.validate(doc, schema)
    if kind == "NodePool":
        # "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"
        for r in doc["spec"]["template"]["spec"]["requirements"]:
            assert r["values"] and (r["operator"] == "In" or (len(r["values"]) == 1 and int(r["values"][0]) >= 0))
