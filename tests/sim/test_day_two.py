"""Day two on the real engine (issue 18): changes the impact table predicts, applied for real to the
`sim` stack on the simulated p5 cluster, each compared resource by resource with the real preview.

One deployment for the module, changed step by step (the order of the tests is the order of the
days). For each change: the offline impact (the render of the changed copy classified against the
render before it, `components/offline/impact.py`) and the real `pulumi preview` (each resource's
operation from the engine's events) are printed side by side and must agree; then `up`, and the
cluster is checked (which runs kept their uid, which were recreated, no AlreadyExists).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import ENABLE, log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from simdeploy import (NAMESPACE, ROOT, RUNS, RUNS_TIMEOUT, STACK, Live, Pulumi, engine_warnings,  # noqa: E402
                       job_complete, mpijob_succeeded, project, real_op, rendered_objects, wait)

from cluster import nodes as nodes_mod  # noqa: E402
from components.k8s import kueue  # noqa: E402
from components.offline import impact, unset_secrets  # noqa: E402
from components.stack.labels import GPU_NODES_ANNOTATION  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

@pytest.fixture(scope="module")
def live(cluster, tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("day-two")
    # The changes below restart runs: the stack accepts that, as a stack under test would.
    workdir = project(tmp, {"rltrain:workloads.allowRunRestart": True})
    cluster.reset_storage()
    lv = Live(cluster, workdir, request)
    up = lv.pulumi("up")
    assert not engine_warnings(up), engine_warnings(up)
    lv.runs_done()
    # The base record as deployed: `up` set the secrets in the copy's stack file, which the render
    # reads (set or not set changes the recorded secret inputs).
    lv.rows = lv.offline()
    yield lv
    lv.pulumi("destroy")


def _apply(lv: Live, what: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Preview (compared with the offline impact), up, and every run finished again; returns the
    agreed operations and the run uids before and after."""
    before = lv.uids()
    preview = lv.pulumi("preview")
    assert not engine_warnings(preview), engine_warnings(preview)
    ops = lv.compare(what, preview)
    up = lv.pulumi("up")
    assert not engine_warnings(up), engine_warnings(up)
    assert not up["failed"], up["failed"]
    lv.runs_done()
    return ops, before, lv.uids()


def _restarted(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in before if before[name] != after[name]}


def test_1_a_script_edit_restarts_only_the_runs_that_mount_it(live):
    script = live.project / "components" / "scripts" / "resume_wrapper.py"
    script.write_text(script.read_text() + "\n# day two: an edit of the resume wrapper\n")
    ops, before, after = _apply(live, "resume_wrapper.py edited")
    # The training runs mount it; validation and the NCCL test do not, and keep their uid.
    assert _restarted(before, after) == {"rltrain-training", "rltrain-multinode"}
    assert ops["workloads-single-node-job"] == ops["workloads-multi-node-job"] == "replace"


def test_2_an_image_tag_restarts_every_run_of_that_image_and_nothing_else(live):
    live.edit_stack(lambda c: c["rltrain:workloads"].update(
        image=c["rltrain:workloads"]["image"].rsplit(":", 1)[0] + ":20260402-000000"))
    ops, before, after = _apply(live, "image tag changed")
    # The NCCL test runs its own image (workloads.ncclTest.image): it keeps its uid.
    assert _restarted(before, after) == {"rltrain-validation", "rltrain-training", "rltrain-multinode"}
    assert {n for n, op in ops.items() if op not in ("same", "replace")} == set(), ops


def test_3_the_nccl_message_size_replaces_only_the_mpijob(live):
    live.edit_stack(lambda c: c["rltrain:workloads"].setdefault("ncclTest", {}).update(messageSizeBytes=1 << 30))
    ops, before, after = _apply(live, "NCCL message size changed")
    assert _restarted(before, after) == {"rltrain-nccl-test"}


def kueue_names(cluster, plural: str) -> list[str]:
    return sorted(i["metadata"]["name"] for i in cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/{plural}")["items"])


def active(cluster, name: str) -> bool:
    cq = cluster.get(kueue.API_VERSION, "ClusterQueue", name) or {}
    return any(c["type"] == "Active" and c["status"] == "True" for c in (cq.get("status") or {}).get("conditions", []))


# (what, the edit of components/k8s/kueue.py, the operations the change must take and no other)
KUEUE_CHANGES = (
    ("topology levels changed (network-node-layer-1 dropped)",
     "for label in (*NETWORK_LAYERS, HOSTNAME_LABEL)", "for label in (*NETWORK_LAYERS[1:], HOSTNAME_LABEL)",
     {"kueue-topology": "replace", "kueue-flavor": "replace", "kueue-cluster-queue": "update"}),
    ("flavor node labels and tolerations changed",
     '{"nodeLabels": dict(node_labels), "tolerations": [dict(GPU_TOLERATION)]}',
     '{"nodeLabels": {**node_labels, "kubernetes.io/os": "linux"}, "tolerations": [dict(GPU_TOLERATION), '
     '{"key": "vpc.amazonaws.com/efa", "operator": "Exists", "effect": "NoSchedule"}]}',
     {"kueue-flavor": "replace", "kueue-cluster-queue": "update"}),
)


def test_4_kueue_flavor_and_topology_changes_do_not_hang_on_the_finalizer(live):
    """A ResourceFlavor's and a Topology's fields are immutable and Kueue keeps its resource-in-use
    finalizer on them while something names them: content-named (k8s/kueue.py), a change creates the
    new object, updates the ClusterQueue in place and deletes the old one once nothing names it.
    (The quota, the ClusterQueue's third kind of change, is scenario 9: it follows the node count.)"""
    for what, old, new, expected in KUEUE_CHANGES:
        old_flavor, old_topology = live.deployed("ResourceFlavor"), live.deployed("Topology")
        live.edit_program("components/k8s/kueue.py", old, new)
        ops, before, after = _apply(live, what)
        assert {n: op for n, op in ops.items() if op != "same"} == expected, ops
        assert _restarted(before, after) == set()
        flavor, topology = live.deployed("ResourceFlavor"), live.deployed("Topology")
        assert flavor != old_flavor
        # Nothing left behind on its finalizer: the old objects are gone once `up` returns.
        assert kueue_names(live.cluster, "resourceflavors") == [flavor]
        assert kueue_names(live.cluster, "topologies") == [topology]
        cq = live.cluster.get(kueue.API_VERSION, "ClusterQueue", NAMESPACE)
        assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == [flavor]
        wait("ClusterQueue Active on the new flavor", lambda: active(live.cluster, NAMESPACE), 60)
        log(live.request, f"{what}: flavor {old_flavor} -> {flavor}, topology {old_topology} -> {topology}")


CLAIM = "fsx-claim"


def claim_request(lv: Live) -> str:
    return lv.cluster.get("v1", "PersistentVolumeClaim", CLAIM, NAMESPACE)["spec"]["resources"]["requests"]["storage"]


def _refused_by_the_api_server(lv: Live, what: str, words: str) -> str:
    """The impact guard refuses the change; the real engine is then shown to fail on it too: the
    preview (the provider's dry run of the update) or else `up`. Nothing is lost: no run restarts,
    the deployed record stays the base. Returns where it failed."""
    base, before = lv.rows, lv.uids()
    preview = lv.pulumi("preview", check=False)
    if preview["ok"]:
        ops = lv.compare(what, preview)
        assert {n: op for n, op in ops.items() if op != "same"} == {"storage-claim": "refused"}, ops
        failed, where = lv.pulumi("up", check=False), "up"
    else:
        offline = {i.name: i.kind for i in impact.classify(base, lv.offline(), unset_secrets.load_stack(STACK, lv.project)[2])
                   if i.kind != impact.IN_PLACE or i.name == "storage-claim"}
        log(lv.request, f"{what}: offline {offline}; real preview: failed")
        assert offline == {"storage-claim": impact.REFUSED}, offline
        failed, where = preview, "preview"
    assert not failed["ok"] and words in json.dumps(failed), failed.get("diagnostics")
    log(lv.request, f"{what}: {where} refused by the API server: {words!r}")
    assert lv.uids() == before
    lv.rows = base
    return where


def test_5_the_claim_size_is_refused_before_up_unless_its_class_grows_claims(live):
    assert claim_request(live) == "4800Gi"
    # Growing, while the storage class does not allow expansion (the sim's, like most).
    live.edit_stack(lambda c: c["rltrain:storage"].update(claimSizeGiB=9600))
    # Seen: the preview passes and `up` fails. The dry run is refused too, but with 403 Forbidden
    # (admission), which the provider's preview swallows (pulumi-kubernetes provider/pkg/provider/
    # provider.go Update: `req.GetPreview() && apierrors.IsForbidden(awaitErr)`): a real preview
    # cannot show this refusal, the impact guard must.
    assert _refused_by_the_api_server(live, "claimSizeGiB 4800 -> 9600 (class without expansion)",
                                      "only dynamically provisioned pvc can be resized") == "up"
    assert claim_request(live) == "4800Gi"
    # The cluster's admin lets the class grow claims; the stack says so: growing is in place.
    live.cluster.api(live.cluster.resource_path("storage.k8s.io/v1", "StorageClass", "fsx-sc"), "PATCH",
                     {"allowVolumeExpansion": True}, content_type="application/merge-patch+json")
    live.edit_stack(lambda c: c["rltrain:storage"].update(allowClaimExpansion=True))
    ops, before, after = _apply(live, "claimSizeGiB 4800 -> 9600 (allowClaimExpansion)")
    assert {n: op for n, op in ops.items() if op != "same"} == {"storage-claim": "update"}, ops
    assert _restarted(before, after) == set()
    assert claim_request(live) == "9600Gi"
    # Shrinking: refused whatever the class.
    live.edit_stack(lambda c: c["rltrain:storage"].update(claimSizeGiB=2400))
    # Seen: already the preview fails: the dry run's 422 Invalid (validation: "can not be less than
    # status.capacity") is not swallowed.
    _refused_by_the_api_server(live, "claimSizeGiB 9600 -> 2400", "can not be less than")
    live.edit_stack(lambda c: c["rltrain:storage"].update(claimSizeGiB=9600))
    # The refused `up`s lost nothing: the state still matches the cluster and the stack file.
    preview = live.pulumi("preview", "--refresh")
    assert all(real_op(e["ops"]) == "same" for e in preview["ops"].values()), preview["ops"]
    assert claim_request(live) == "9600Gi"


def test_6_a_finished_run_refresh_then_up_recreates_nothing(live):
    before = live.uids()
    refreshed = live.pulumi("refresh")
    assert not engine_warnings(refreshed), engine_warnings(refreshed)
    preview = live.pulumi("preview")
    changed = {urn: e["ops"] for urn, e in preview["ops"].items() if real_op(e["ops"]) != "same"}
    assert not changed, changed
    live.compare("refresh after every run finished", preview)  # the program did not change: nothing
    up = live.pulumi("up")
    assert not {u: e["ops"] for u, e in up["ops"].items() if real_op(e["ops"]) != "same"}
    assert live.uids() == before


def test_7_a_run_deleted_by_hand_comes_back_with_up_refresh(live):
    job = live.cluster.resource_path("batch/v1", "Job", "rltrain-training", NAMESPACE)
    live.cluster.api(job + "?propagationPolicy=Background", "DELETE")
    wait("Job rltrain-training deleted", lambda: live.cluster.get("batch/v1", "Job", "rltrain-training", NAMESPACE)
         is None, 60)
    # A plain preview reads the state, not the cluster: nothing to do.
    plain = live.pulumi("preview")
    assert all(real_op(e["ops"]) == "same" for e in plain["ops"].values()), plain["ops"]
    live.compare("a Job deleted by hand, plain preview", plain)
    # --refresh reads the cluster first: the Job is gone, so it is created again.
    refreshed = live.pulumi("preview", "--refresh")
    ops = {urn.split("::")[-1]: real_op(e["ops"]) for urn, e in refreshed["ops"].items()}
    assert ops["workloads-single-node-job"] == "create", ops
    assert {n for n, op in ops.items() if op != "same"} == {"workloads-single-node-job"}, ops
    # The offline impact compares program with program: it cannot see what was done to the cluster
    # by hand (by design: the render needs no cluster); only a refresh can.
    log(live.request, "a Job deleted by hand, preview --refresh: resource  offline  real preview\n"
                      "  workloads-single-node-job  same (no cluster read)  create")
    live.pulumi("up", "--refresh")
    wait("the recreated run finished", lambda: job_complete(live.cluster, "rltrain-training"), RUNS_TIMEOUT)
    # Every object of the copy's render (its edited script's ConfigMap included) exists again.
    expected = {(r["inputs"]["apiVersion"], r["inputs"]["kind"], r["inputs"]["metadata"].get("namespace"),
                 r["inputs"]["metadata"]["name"]) for r in live.rows
                if r["type"].startswith("kubernetes:") and "kind" in r["inputs"]}
    missing = [o for o in sorted(expected, key=str) if live.cluster.get(o[0], o[1], o[3], o[2]) is None]
    assert not missing, missing


# (file, text, replaced by, the rule that must refuse it, words of its message)
BROKEN = (
    # A label change replaces the run; in the preview of that replacement the engine hands the
    # policy the new object under a suffixed name (seen: Job/rltrain-training22th9), so the words
    # matched are the rule's own.
    ("components/workloads/job.py", "{**obj_labels, **kueue.queue_labels(cfg)}", "obj_labels", "gpu-runs-queued",
     "requests GPUs without the label kueue.x-k8s.io/queue-name while the stack queues on LocalQueue training"),
    ("components/workloads/pod.py", "            tolerations=gpu_tolerations(),", "            tolerations=[],",
     "schedules-on-gpu-nodes", "does not tolerate taint nvidia.com/gpu"),
)


def test_policy_pack_in_a_real_preview(live):
    """The pack through the real CLI (`--policy-pack`, as a binary analyzer: cluster/deploy.py), on
    what the engine really sends (a deployed stack's outputs): the stack passes; a GPU run without
    the queue label, and runs without the GPU toleration, fail with the rule's message."""
    pack = str(ROOT / "policy")
    ok = live.pulumi("preview", "--policy-pack", pack)
    assert not [p for p in ok["policy"] if p["level"] == "mandatory"], ok["policy"]
    for rel, old, new, rule, words in BROKEN:
        path = live.project / rel
        text = path.read_text()
        assert text.count(old) == 1, (rel, old)
        path.write_text(text.replace(old, new))
        try:
            res = live.pulumi("preview", "--policy-pack", pack, check=False)
        finally:
            path.write_text(text)
        hits = [p for p in res["policy"] if p["policy"] == rule]
        log(live.request, f"broken ({rel}): {rule}: {[p['message'][:160] for p in hits]}")
        assert not res["ok"] and any(words in p["message"] for p in hits), res["policy"]
        assert all(p["level"] == "mandatory" for p in hits)


def _signature(cluster, objs) -> dict:
    """Per object: its uid, generation and what the Pulumi field manager last applied (a write by
    another stack's `up` or `destroy` would change one of them)."""
    out = {}
    for api_version, kind, namespace, name in objs:
        o = cluster.get(api_version, kind, name, namespace)
        meta = (o or {}).get("metadata", {})
        out[(kind, namespace, name)] = (meta.get("uid"), meta.get("generation"), sorted(
            (m.get("operation"), m.get("time"), json.dumps(m.get("fieldsV1"), sort_keys=True))
            for m in meta.get("managedFields", []) if m.get("manager", "").startswith("pulumi-kubernetes")))
    return out


def _unchanged_by_the_other(lv: Live, mine, before) -> None:
    assert _signature(lv.cluster, mine) == before
    preview = lv.pulumi("preview", "--refresh")
    assert all(real_op(e["ops"]) == "same" for e in preview["ops"].values()), preview["ops"]


def test_8_two_stacks_in_two_namespaces_leave_each_other_alone(live, tmp_path):
    """A second stack (the repository's program) in namespace rltrain-b beside the deployed one: its
    runs queue on its own ClusterQueue (Kueue manages its namespace: the rltrain/kueue-managed label,
    k8s/kueue.py), and neither its `up` nor its `destroy` writes an object of the first stack."""
    other = "rltrain-b"
    # The copy's record (rendered from the copy in a process of its own: its edited Kueue names).
    mine = sorted({(r["inputs"]["apiVersion"], r["inputs"]["kind"], r["inputs"]["metadata"].get("namespace"),
                    r["inputs"]["metadata"]["name"]) for r in live.rows
                   if r["type"].startswith("kubernetes:") and "kind" in r["inputs"]}, key=str)
    before = _signature(live.cluster, mine)
    assert all(v[0] for v in before.values())
    workdir = project(tmp_path, {"rltrain:workloads.allowRunRestart": True, "rltrain:training.namespace": other},
                      "other")
    theirs = rendered_objects(workdir / "project")
    assert not {(k, n) for _, k, ns, n in theirs if ns is None} & {(k, n) for _, k, ns, n in mine if ns is None}
    live.cluster.apply(nodes_mod.storage(unset_secrets.load_stack(STACK, workdir / "project")[2]))
    b = Pulumi(workdir, live.cluster.kubeconfig, live.request)
    first = b("preview")
    created = {urn.split("::")[-1]: real_op(e["ops"]) for urn, e in first["ops"].items()
               if e["type"].startswith("kubernetes:")}
    log(live.request, f"{other}, first preview: offline create {len(theirs)} objects; real preview: "
                      f"{dict(sorted(Counter(created.values()).items()))}")
    assert set(created.values()) == {"create"} and len(created) == len(theirs), created
    up = b("up")
    try:
        assert not engine_warnings(up), engine_warnings(up)
        wait(f"the runs of {other} finished", lambda: all(job_complete(live.cluster, j, other) for j in RUNS)
             and mpijob_succeeded(live.cluster, "rltrain-nccl-test", other), RUNS_TIMEOUT)
        # Queued, admitted whole by its own ClusterQueue (not run around the queue).
        wls = live.cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{other}/workloads")["items"]
        queues = {w["metadata"]["name"]: ((w.get("status") or {}).get("admission") or {}).get("clusterQueue")
                  for w in wls}
        log(live.request, f"{other}: workloads and their ClusterQueue: {queues}")
        assert len(queues) == len(RUNS) + 1 and set(queues.values()) == {other}, queues
        _unchanged_by_the_other(live, mine, before)
    finally:
        down = b("destroy")
    assert not engine_warnings(down), engine_warnings(down)
    wait(f"every object of {other} deleted", lambda: all(live.cluster.get(a, k, n, ns) is None
                                                          for a, k, ns, n in theirs), 60)
    _unchanged_by_the_other(live, mine, before)


def test_9_scaling_the_gpu_nodes_2_to_4_reruns_the_checks_and_restarts_only_training(live):
    """Two more GPU nodes join (kwok), then gpuNodes.count 2 -> 4: the checks re-run on all four
    (no opt-in: nothing to lose), the training runs restart (the stack opted in), the quota follows,
    and every run is admitted on the current flavor."""
    existing = live.cluster.get("v1", "Node", "gpu-p5-48xlarge-0")
    hw = unset_secrets.load_stack(live.cluster.info["stack"])[2]
    for i in (2, 3):
        live.cluster.api("/api/v1/nodes", "POST", nodes_mod.gpu_node(
            hw, i, stack=live.cluster.info["stack"], region=existing["metadata"]["labels"]["topology.kubernetes.io/region"]))
    live.edit_stack(lambda c: c["rltrain:gpuNodes"].update(count=4))
    ops, before, after = _apply(live, "gpuNodes.count 2 -> 4")
    changed = {n: op for n, op in ops.items() if op != "same"}
    log(live.request, f"scaling: {changed}")
    assert {"rltrain-validation", "rltrain-nccl-test", "rltrain-multinode"} <= _restarted(before, after)
    assert changed["kueue-cluster-queue"] == "update"
    kinds = live.kinds
    assert kinds["workloads-validation-job"] == kinds["workloads-nccl-test-mpijob"] == impact.CHECK_RERUN, kinds
    assert kinds["workloads-multi-node-job"] == impact.RUN_RESTART, kinds
    mpi = live.cluster.get("kubeflow.org/v2beta1", "MPIJob", "rltrain-nccl-test", NAMESPACE)
    assert mpi["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    assert live.cluster.get("batch/v1", "Job", "rltrain-multinode", NAMESPACE)["spec"]["completions"] == 4
    ns = live.cluster.get("v1", "Namespace", NAMESPACE)
    assert ns["metadata"]["annotations"][GPU_NODES_ANNOTATION] == "4"
    flavor = live.deployed("ResourceFlavor")
    wls = live.cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
    flavors = {f for w in wls for ps in ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments", [])
               for f in (ps.get("flavors") or {}).values()}
    assert flavors == {flavor}, flavors
