"""The deploy model: what AWS, EKS, the engine and the kubelet do with the recorded resources.

Each defect the reviews found is shown here twice: the committed p5 record passes, and the same
record with the fix taken out fails, naming the missing flow or edge.
"""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys

import pytest
from support import rendered

from components.offline import deploy_model, policy, render
from components.offline.resources import Violation
from components.offline.mock_engine import ROOT, after_deploy, eks_cluster_security_group
from components.stack import catalog
from components.workloads import nccl

DEPLOY_RULES = ("deploy-order", "network-flows", "least-privilege", "efa-hugepages", "pod-fits-node")


def p5_record() -> list[dict]:
    return copy.deepcopy(rendered("p5").resources)


def by_name(rows: list[dict], name: str, type_prefix: str = "") -> dict:
    found = [r for r in rows if r["name"] == name and r["type"].startswith(type_prefix)]
    assert len(found) == 1, (name, [r["type"] for r in found])
    return found[0]


def violations(rows: list[dict], rule: str) -> list[Violation]:
    return [v for v in policy.evaluate(rows, rules=[rule])]


@pytest.mark.parametrize("stack", ["byo", "dev", "p4de", "p5"])
def test_every_stack_passes_the_deploy_model(stack):
    assert policy.evaluate(rendered(stack).resources, rules=DEPLOY_RULES) == []


# --- reachability ---------------------------------------------------------------------------------


def test_gpu_interfaces_carry_the_security_group_eks_creates():
    lt = by_name(p5_record(), "gpu-lt")["inputs"]
    groups = {tuple(n["securityGroups"]) for n in lt["networkInterfaces"]}
    eks_sg = eks_cluster_security_group("cluster-eks")
    assert groups == {(after_deploy("gpu-sg", "id"), eks_sg)}
    # pulumi-eks's own control-plane group renders differently and is not on the nodes.
    assert after_deploy("cluster-eks", "clusterSecurityGroupId") != eks_sg


def test_flow_table_of_p5_is_complete():
    results = deploy_model.evaluate_flows(p5_record())
    names = {r.flow.name for r in results}
    assert {"GPU nodes -> API server", "control plane -> GPU kubelet", "GPU node <-> GPU node, all traffic (EFA, NCCL)",
            "FSx -> GPU nodes Lustre 988-988", "GPU nodes -> FSx Lustre 1018-1023",
            "GPU pods -> CoreDNS on system nodes (udp)", "GPU nodes -> registries, S3, AWS APIs"} <= names
    assert all(r.ok for r in results)
    text = "\n".join(render.summary(rendered("p5")).splitlines())
    assert "network flows" in text and "ok  FSx -> GPU nodes Lustre 988-988" in text


def test_without_the_eks_cluster_sg_gpu_nodes_cannot_join():
    rows = p5_record()
    for nic in by_name(rows, "gpu-lt")["inputs"]["networkInterfaces"]:
        nic["securityGroups"] = [after_deploy("gpu-sg", "id")]
    missing = {v.resource for v in violations(rows, "network-flows")}
    assert {"flow GPU nodes -> API server", "flow control plane -> GPU kubelet",
            "flow GPU pods -> CoreDNS on system nodes (udp)"} <= missing


def test_pulumi_eks_control_plane_group_instead_is_caught_too():
    """Today's defect as written: the interfaces carried eks.Cluster.cluster_security_group_id."""
    rows = p5_record()
    for nic in by_name(rows, "gpu-lt")["inputs"]["networkInterfaces"]:
        nic["securityGroups"] = [after_deploy("gpu-sg", "id"), after_deploy("cluster-eks", "clusterSecurityGroupId")]
    vs = violations(rows, "network-flows")
    api = next(v for v in vs if v.resource == "flow GPU nodes -> API server")
    assert "no ingress rule on [EKS cluster SG] from GPU nodes (tcp 443)" in api.message


def test_without_the_fsx_to_node_rules_lustre_callbacks_are_blocked():
    # The GPU nodes carry the GPU group and the EKS cluster group: FSx calls back through either.
    rows = [r for r in p5_record() if not r["name"].endswith(("-to-nodes", "-to-cluster"))]
    vs = violations(rows, "network-flows")
    assert {v.resource for v in vs} == {f"flow FSx -> {g} Lustre {p}" for g in ("GPU nodes", "system nodes")
                                        for p in ("988-988", "1018-1023")}
    # Violations come by resource (never in record order): 1018-1023 sorts before 988-988.
    assert [v.resource for v in vs][:2] == ["flow FSx -> GPU nodes Lustre 1018-1023",
                                            "flow FSx -> GPU nodes Lustre 988-988"]
    assert "no ingress rule on [gpu-sg, EKS cluster SG] from FSx (tcp 988)" in vs[1].message
    # Only the GPU group's rules gone: the cluster group's still carry the GPU nodes' callbacks.
    assert violations([r for r in p5_record() if not r["name"].endswith("-to-nodes")], "network-flows") == []


def test_without_the_gpu_self_egress_rule_efa_fails():
    rows = [r for r in p5_record() if r["name"] != "gpu-self-egress"]
    vs = violations(rows, "network-flows")
    assert [v.resource for v in vs] == ["flow GPU node <-> GPU node, all traffic (EFA, NCCL)"]
    assert "no egress rule on [gpu-sg, EKS cluster SG] to GPU nodes (all traffic, by security-group reference)" \
        in vs[0].message


def test_without_the_gpu_self_ingress_rule_efa_fails_unless_the_eks_sg_admits_it():
    rows = [r for r in p5_record() if r["name"] != "gpu-self-ingress"]
    # The EKS cluster security group on every interface admits all traffic from its members
    # (EKS documents it), so GPU-to-GPU ingress still holds ...
    assert violations(rows, "network-flows") == []
    # ... but not once the interfaces lose that group as well.
    for nic in by_name(rows, "gpu-lt")["inputs"]["networkInterfaces"]:
        nic["securityGroups"] = [after_deploy("gpu-sg", "id")]
    efa = [v for v in violations(rows, "network-flows") if "EFA" in v.resource]
    assert efa and "no ingress rule on [gpu-sg] from GPU nodes" in efa[0].message


def test_a_cidr_egress_rule_does_not_carry_efa():
    rows = [r for r in p5_record() if r["name"] != "gpu-self-egress"]
    # gpu-internet-egress (0.0.0.0/0, all traffic) remains: still refused (KNOWN-FAILURES F4).
    assert by_name(rows, "gpu-internet-egress")["inputs"]["cidrIpv4"] == "0.0.0.0/0"
    assert violations(rows, "network-flows")


# --- order ----------------------------------------------------------------------------------------


def test_record_has_the_engine_edges():
    rows = p5_record()
    ng = by_name(rows, "gpu-nodes")
    assert "eks:index:Cluster::cluster-eks" in ng["dependsOn"]
    assert by_name(rows, "storage-claim")["provider"] == "pulumi:providers:kubernetes::cluster-k8s"
    assert "kubernetes:helm.sh/v3:Release::nvidia-device-plugin" in \
        by_name(rows, "workloads-single-node-job")["dependsOn"]


def test_fsx_csi_addon_without_a_path_to_the_cluster_is_refused():
    rows = p5_record()
    addon = by_name(rows, "addons-fsx-csi")
    addon["dependsOn"], addon["parent"] = [], None
    vs = violations(rows, "deploy-order")
    assert [v.resource for v in vs] == ["aws:eks/addon:Addon addons-fsx-csi"]
    assert "no path to the EKS cluster" in vs[0].message


def test_gpu_workload_not_after_its_node_group_is_refused():
    rows = p5_record()
    # Cut the workloads off the add-ons (which wait for the node groups; the node monitoring agent
    # add-on names them itself) and the volume.
    for r in rows:
        if r["name"].startswith("workloads"):
            r["dependsOn"] = [d for d in r["dependsOn"] if "helm.sh" not in d and "PersistentVolumeClaim" not in d
                              and "aws:eks/addon:Addon::addons-" not in d]
    by_name(rows, "addons")["dependsOn"] = []
    msgs = {(v.resource, v.message.split(":")[0]) for v in violations(rows, "deploy-order")}
    assert ("Job/rltrain-training", "is not ordered after the GPU node group") in msgs
    assert ("Job/rltrain-training", "is not ordered after its volume claim fsx-claim") in msgs


def test_render_exits_1_naming_the_missing_flow(monkeypatch, tmp_path, capsys):
    real = render.render_stack

    def without_fsx_callbacks(stack, root=ROOT):
        r = real(stack, root)
        r.result.records[:] = [x for x in r.result.records if not x.name.endswith(("-to-nodes", "-to-cluster"))]
        return r

    monkeypatch.setattr(render, "render_stack", without_fsx_callbacks)
    assert render.main(["--stack", "p5", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "policy [network-flows] flow FSx -> GPU nodes Lustre 988-988: not allowed" in err
    assert not (tmp_path / "out").exists()


def test_creation_waves_put_the_cluster_before_the_workloads():
    waves = deploy_model.Graph(p5_record()).order()
    at = {ref: i for i, wave in enumerate(waves) for ref in wave}
    assert at["eks:index:Cluster::cluster-eks"] < at["aws:eks/nodeGroup:NodeGroup::gpu-nodes"] \
        < at["kubernetes:helm.sh/v3:Release::nvidia-device-plugin"] < at["kubernetes:batch/v1:Job::workloads-single-node-job"]
    assert at["aws:fsx/lustreFileSystem:LustreFileSystem::storage-fs"] < at["kubernetes:core/v1:PersistentVolume::storage-pv"]


# --- memory ---------------------------------------------------------------------------------------


def test_allocatable_takes_out_the_efa_huge_pages():
    p5 = catalog.get("p5.48xlarge")
    plain, efa = p5.allocatable(), p5.allocatable(efa=True)
    assert efa.hugepages_2mi_mib == 5128 * 2 == 10256
    assert plain.memory_mib_conservative - efa.memory_mib_conservative == 10256
    assert catalog.get("g5.xlarge").allocatable(efa=True).hugepages_2mi_mib == 0  # no EFA, no pool


def test_dev_fits_with_huge_pages_and_shows_its_numbers():
    text = render.summary(rendered("dev"))
    # g6.12xlarge: 178 933 MiB conservative - 10 256 MiB huge pages = 168 677 MiB = 164.7 GiB.
    assert "fit on g6.12xlarge: allocatable 47.81 CPU, 164.7 GiB" in text
    assert "Job/rltrain-multinode: 46 CPU, 161.0 GiB, 5120 MiB huge pages, 4 GPU, 1 EFA -> headroom" in text
    # The single-node run does not use EFA (trainer profile): no device, no huge pages, same memory.
    assert "Job/rltrain-training: 46 CPU, 161.0 GiB, 0 MiB huge pages, 4 GPU, 0 EFA -> headroom" in text
    assert policy.evaluate(rendered("dev").resources, rules=["pod-fits-node"]) == []


def test_efa_pod_without_huge_pages_is_refused():
    rows = p5_record()
    job = by_name(rows, "workloads-multi-node-job")
    res = job["inputs"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["limits"]["hugepages-2Mi"] == res["requests"]["hugepages-2Mi"] == "5Gi"
    del res["limits"]["hugepages-2Mi"], res["requests"]["hugepages-2Mi"]
    assert [v.resource for v in violations(rows, "efa-hugepages")] == ["Job/rltrain-multinode/trainer"]
    job["inputs"]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"})
    assert violations(rows, "efa-hugepages") == []


def test_more_huge_pages_than_the_pool_do_not_fit():
    rows = p5_record()
    res = by_name(rows, "workloads-single-node-job")["inputs"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["limits"]["hugepages-2Mi"] = res["requests"]["hugepages-2Mi"] = "20Gi"
    vs = violations(rows, "pod-fits-node")
    assert vs and "hugepages-2Mi 20480 MiB > the node's pool of 10256 MiB" in vs[0].message


# --- privilege ------------------------------------------------------------------------------------


def test_full_access_policy_is_refused():
    rows = p5_record()
    rows.append({"type": "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "name": "addons-fsx-csi-role-full",
                 "custom": True, "dependsOn": [], "provider": None, "parent": "addons", "options": {},
                 "inputs": {"policyArn": "arn:aws:iam::aws:policy/AmazonFSxFullAccess", "role": "x"}})
    vs = violations(rows, "least-privilege")
    assert [v.resource for v in vs] == ["role policy attachment addons-fsx-csi-role-full"]
    assert "AmazonFSxFullAccess" in vs[0].message


def test_wildcard_inline_policy_is_refused():
    rows = p5_record()
    rows.append({"type": "aws:iam/rolePolicy:RolePolicy", "name": "too-wide", "custom": True, "dependsOn": [],
                 "provider": None, "parent": None, "options": {},
                 "inputs": {"policy": json.dumps({"Statement": [{"Effect": "Allow", "Action": "s3:*",
                                                                 "Resource": "*"}]})}})
    assert [v.resource for v in violations(rows, "least-privilege")] == ["policy too-wide"]


# --- the record a reviewer reads ------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["byo", "dev", "p4de", "p5"])
def test_no_line_of_the_record_is_a_whole_file(stack):
    text = render.resources_json(rendered(stack).result)
    assert max(len(line) for line in text.splitlines()) < 4000


def test_user_data_shown_decoded_beside_its_encoded_form():
    lt = by_name(p5_record(), "gpu-lt")
    decoded = lt["decoded"]["userData"]
    assert "Content-Type: application/node.eks.aws" in decoded
    assert "kind: NodeConfig" in decoded and "      strategy: RAID0" in decoded
    assert isinstance(lt["inputs"]["userData"], str)  # the engine's form stays as it is sent


# --- NCCL threshold -------------------------------------------------------------------------------

# The published EKS rows for 2 x p5 (2023 stack): 313.3 GB/s at 1 GiB, 437.8 GB/s at 2 GiB.
_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
           "     time   algbw   busbw #wrong")


def _table(busbw_1g: float, busbw_2g: float) -> str:
    rows = [f"  {1 << 30}     268435456     float     sum      -1   6424.5  167.13  {busbw_1g:.2f}      0"
            f"   6420.1  167.24  {busbw_1g:.2f}      0",
            f"  {2 << 30}     536870912     float     sum      -1   9195.3  233.54  {busbw_2g:.2f}      0"
            f"   9190.0  233.67  {busbw_2g:.2f}      0"]
    return "\n".join(["# Collective test starting: all_reduce_perf", _HEADER, *rows,
                      "# Out of bounds values : 0 OK", ""])


def _check_args() -> list[str]:
    script = nccl.launcher_script(rendered("p5").cfg)
    return shlex.split(script.split("| ", 1)[1])[2:]  # after `python3 /scripts/nccl_check.py`


@pytest.mark.parametrize("table,code,verdict", [
    (_table(313.3, 437.8), 0, "NCCL CHECK PASS: busbw 437.80 GB/s at 2147483648 B"),
    (_table(2.9, 3.1), 1, "NCCL CHECK FAIL: busbw 3.10 GB/s at 2147483648 B"),
])
def test_p5_check_compares_the_published_eks_size(table, code, verdict):
    proc = subprocess.run([sys.executable, str(ROOT / "components/scripts/nccl_check.py"), *_check_args()],
                          input=table, capture_output=True, text=True, timeout=30)
    assert proc.returncode == code, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(verdict)
    assert "437.8 GB/s at 2 GiB, EKS figure" in last and "Kubernetes section" in last


def test_p4de_threshold_is_labelled_a_slurm_figure():
    ref = catalog.get("p4de.24xlarge").nccl_reference
    assert (ref.busbw_gbps, ref.size_bytes, ref.platform) == (76.8, 1 << 30, "Slurm")
    assert "Slurm figure" in nccl.check_label(rendered("p4de").cfg)
