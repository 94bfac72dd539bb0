"""Policy rules (components/offline/policy.py): every stack passes; each breach is refused with its rule."""

import copy
import json

import pytest
from support import STACKS, rendered

from components.offline import policy
from components.offline import render
from components.offline.mock_engine import ROOT


def resources(stack):
    return copy.deepcopy(rendered(stack).resources)


def find(rs, kind, name):
    return next(r["inputs"] for r in rs if r["inputs"].get("kind") == kind and r["inputs"]["metadata"]["name"] == name)


def trainer(rs, stack_job="rltrain-training"):
    return find(rs, "Job", stack_job)["spec"]["template"]["spec"]


def rules_of(rs):
    return {v.rule for v in policy.evaluate(rs)}


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_passes_every_rule(stack):
    assert [str(v) for v in policy.evaluate(resources(stack))] == []


@pytest.mark.parametrize("stack", STACKS)
def test_committed_resources_pass(stack):
    rows = json.loads((ROOT / "rendered" / stack / "resources.json").read_text())
    assert [str(v) for v in policy.evaluate(rows)] == []


def test_latest_image_refused():
    rs = resources("p5")
    trainer(rs)["containers"][0]["image"] = "repo/rl:latest"
    vs = [v for v in policy.evaluate(rs) if v.rule == "image-pinned"]
    assert vs and vs[0].resource == "Job/rltrain-training/trainer" and "not pinned" in vs[0].message


def test_an_image_unknown_before_deploy_is_not_refused():
    """A first preview sees the built image's reference (repository URL, tag, digest) as one unknown
    value: pinned by construction (components/aws/image.py), not a violation; an untagged one is."""
    from components.offline.mock_engine import UNKNOWN
    rs = resources("p5")
    trainer(rs)["containers"][0]["image"] = UNKNOWN
    assert "image-pinned" not in rules_of(rs)
    trainer(rs)["containers"][0]["image"] = "repo/rl"
    assert "image-pinned" in rules_of(rs)


def test_pull_always_refused():
    rs = resources("p4de")
    trainer(rs)["containers"][0]["imagePullPolicy"] = "Always"
    assert "image-pinned" in rules_of(rs)


def test_four_efa_devices_on_p5_refused():
    rs = resources("p5")
    res = trainer(rs)["containers"][0]["resources"]
    res["limits"]["vpc.amazonaws.com/efa"] = res["requests"]["vpc.amazonaws.com/efa"] = 4
    vs = [v for v in policy.evaluate(rs) if v.rule == "efa-count"]
    assert len(vs) == 1 and "p5.48xlarge has 32" in vs[0].message


def test_dropping_dev_shm_refused():
    rs = resources("p5")
    spec = trainer(rs)
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "dshm"]
    for c in spec["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/dev/shm"]
    vs = [v for v in policy.evaluate(rs) if v.rule == "shm-memory"]
    assert [v.resource for v in vs] == ["Job/rltrain-training"]


def test_efa_env_without_efa_request_refused():
    rs = resources("p5")
    res = find(rs, "Job", "rltrain-multinode")["spec"]["template"]["spec"]["containers"][0]["resources"]
    del res["limits"]["vpc.amazonaws.com/efa"], res["requests"]["vpc.amazonaws.com/efa"]
    assert "efa-env-needs-efa" in rules_of(rs)


def test_single_node_job_requests_no_efa_and_sets_no_efa_env():
    # RLinf on one node talks over NVLink (trainers.py single_node_efa False): no EFA devices, no
    # huge pages, no FI_* settings - and the policy is content.
    rs = resources("p5")
    c = trainer(rs)["containers"][0]
    assert not {"vpc.amazonaws.com/efa", "hugepages-2Mi"} & set(c["resources"]["limits"])
    assert not [e for e in c["env"] if e["name"].startswith("FI_")]
    assert not [v for v in policy.evaluate(rs) if v.resource.startswith("Job/rltrain-training")]


def _multinode_env(rs):
    return find(rs, "Job", "rltrain-multinode")["spec"]["template"]["spec"]["containers"][0]["env"]


def test_placement_rule_passes_the_derived_placement_and_fires_on_the_config_default():
    rs = resources("p5")
    assert "placement-uses-every-node" not in rules_of(rs)
    # The old render: no placement overrides, so the config's own actor 0-7, env 0-3, rollout 4-7
    # on 2 x 8 GPUs - node 1 idles (SEED-DEFECTS D19).
    env = _multinode_env(rs)
    env[:] = [e for e in env if e["name"] != "HYDRA_OVERRIDES"]
    [v] = [v for v in policy.evaluate(rs) if v.rule == "placement-uses-every-node"]
    assert v.resource == "Job/rltrain-multinode"
    assert "actor 0-7, env 0-3, rollout 4-7 on 2 x 8 GPUs leaves node(s) 1 idle" in v.message


def test_placement_rule_fires_on_a_hand_written_placement_for_one_node():
    rs = resources("p5")
    for e in _multinode_env(rs):
        if e["name"] == "HYDRA_OVERRIDES":
            e["value"] = "cluster.component_placement.actor=0-7 cluster.component_placement.env=0-3"
    assert "placement-uses-every-node" in rules_of(rs)


def test_gpu_request_must_equal_instance():
    rs = resources("p4de")
    res = trainer(rs)["containers"][0]["resources"]
    res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = 4
    assert "gpu-count" in rules_of(rs)


def test_oversized_pod_does_not_fit():
    rs = resources("p4de")
    res = trainer(rs)["containers"][0]["resources"]
    res["requests"]["memory"] = res["limits"]["memory"] = "1100Gi"
    vs = [v for v in policy.evaluate(rs) if v.rule == "pod-fits-node"]
    # 1 082 712 MiB conservative allocatable minus 5128 x 2 MiB of EFA huge pages
    assert vs and "allocatable 1047.3 GiB (after 10256 MiB of EFA huge pages)" in vs[0].message


def test_multi_node_pods_must_not_share_nodes():
    rs = resources("p5")
    spec = find(rs, "Job", "rltrain-multinode")["spec"]["template"]["spec"]
    del spec["affinity"]["podAntiAffinity"]
    res = spec["containers"][0]["resources"]
    res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = 4
    assert {"one-pod-per-node", "gpu-count"} <= rules_of(rs)


def test_selector_and_toleration_must_match_node_group():
    rs = resources("p5")
    spec = trainer(rs)
    spec["nodeSelector"] = {"role": "cpu"}
    spec["tolerations"] = []
    msgs = [v.message for v in policy.evaluate(rs) if v.rule == "schedules-on-gpu-nodes"]
    assert any("matches no GPU node group" in m for m in msgs)
    assert any("does not tolerate taint nvidia.com/gpu" in m for m in msgs)


def test_job_without_deadline_refused():
    rs = resources("dev")
    del find(rs, "Job", "rltrain-training")["spec"]["activeDeadlineSeconds"]
    assert "job-deadline" in rules_of(rs)


def test_plain_secret_env_refused():
    rs = resources("dev")
    trainer(rs)["containers"][0]["env"].append({"name": "HF_TOKEN", "value": "hf_abc"})
    assert "no-plain-secret-env" in rules_of(rs)


def test_unprotected_fsx_pv_delete_imdsv1_open_endpoint_refused():
    rs = resources("p5")
    for r in rs:
        if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem":
            r["options"]["protect"] = False
        if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate":
            r["inputs"]["metadataOptions"]["httpTokens"] = "optional"
        if r["type"] == "eks:index:Cluster":
            r["inputs"]["publicAccessCidrs"] = ["0.0.0.0/0"]
    find(rs, "PersistentVolume", "rltrain-fsx-claim")["spec"]["persistentVolumeReclaimPolicy"] = "Delete"
    assert {"stateful-protected", "imdsv2", "endpoint-not-open", "pv-retain"} <= rules_of(rs)


def test_render_refuses_a_violating_stack_and_writes_nothing(tmp_path, monkeypatch, capsys):
    bad = copy.deepcopy(rendered("p5"))
    for rec in bad.result.records:
        if rec.inputs.get("kind") == "Job" and rec.inputs["metadata"]["name"] == "rltrain-training":
            rec.inputs["spec"]["template"]["spec"]["containers"][0]["image"] = "repo/rl:latest"
    monkeypatch.setattr(render, "render_stack", lambda stack, root: bad)
    out = tmp_path / "out"
    assert render.main(["--stack", "p5", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "policy [image-pinned] Job/rltrain-training/trainer" in err and "Fix:" in err
    assert not out.exists()


def test_fit_report_in_render_summary():
    text = render.summary(rendered("p5"))
    assert "fit on p5.48xlarge: allocatable 191.45 CPU, 1883.0 GiB" in text
    assert "EFA huge pages 10256 MiB taken out" in text
    # The DaemonSet reserve is the pinned charts' requests (components/stack/daemonsets.py).
    assert "DaemonSets 275m CPU, 282 MiB" in text
    assert ("Job/rltrain-multinode: 187 CPU, 1845.0 GiB, 5120 MiB huge pages, 8 GPU, 32 EFA -> headroom 4.17 CPU, "
            "37.7 GiB, 5136 MiB huge pages") in text
    # The single-node run uses no EFA: the node's huge pages stay free, its memory is the same.
    assert ("Job/rltrain-training: 187 CPU, 1845.0 GiB, 0 MiB huge pages, 8 GPU, 0 EFA -> headroom 4.17 CPU, "
            "37.7 GiB, 10256 MiB huge pages") in text


def test_every_rule_has_a_description():
    assert len(policy.RULES) >= 14
    assert all(rule.description for rule in policy.RULES.values())


def test_every_rule_of_every_offline_module_is_listed_and_each_name_is_one_rule():
    """policy.RULES collects the rule modules it lists, nothing registers on import: a module of
    components/offline/ that defines a rule and is not listed would check nothing."""
    import importlib
    import pkgutil

    import components.offline
    from components.offline.resources import PolicyRule, policy_rule

    defined = {}
    for info in pkgutil.iter_modules(components.offline.__path__):
        module = importlib.import_module(f"components.offline.{info.name}")
        defined |= {v.name: v for v in vars(module).values() if isinstance(v, PolicyRule)}
    assert defined == policy.RULES
    assert list(policy.RULES)[:2] == ["gpu-count", "efa-count"] and list(policy.RULES)[-1] == "numa-policy-admits"
    twin = policy_rule("gpu-count", "another rule of the same name")(lambda resources, ctx: iter(()))
    with pytest.raises(ValueError, match="two policy rules named 'gpu-count'"):
        policy.rules_of(vars(policy), {"twin": twin})
