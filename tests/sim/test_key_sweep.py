"""Every configuration key, changed on the simulated cluster (issue 34): the impact table's "in place"
must mean `pulumi up` applies it.

The keys and their values come from the config models (cluster/key_sweep.py plans them
against the deployed copy of the `sim` stack); a key whose change alters no Kubernetes object of
the stack, or that the simulated cluster cannot exercise, is printed with why. The swept keys are
applied in groups (key_sweep.groups: in a group an object is either patched by every key touching
it or replaced by every key touching it, so no key's update hides under another's replacement).
For each group: the offline impact beside the real preview (Live.compare: a disagreement fails),
then `up` (a failure where the impact said it applies fails), then every run finished again. A key
the impact guard refuses goes alone, and its `up` must fail; its edit is then undone. A key that
loses data unless opted in (key_sweep.OPT_IN: the claim moved to a new namespace or name) goes
alone with its opt-in, near the end: the new claim binds a volume of the class's provisioner
(cluster/sim.py runs it), and the old claim's volume is deleted when its reclaim policy is Delete
(the provisioner's own) or kept Released when Retain (the harness's static one).
"""

from __future__ import annotations

import time

import pytest
import yaml
from conftest import ENABLE, log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from simdeploy import (NAMESPACE, RUNS_TIMEOUT, Live, engine_warnings, job_complete, mpijob_succeeded,  # noqa: E402
                       project, wait)

from cluster import nodes as nodes_mod  # noqa: E402
from cluster import key_sweep  # noqa: E402
from components.offline import unset_secrets  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]


@pytest.fixture(scope="module")
def live(cluster, tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("key-sweep")
    # Run restarts are part of what is swept: the copy opts in, as a stack under change would.
    workdir = project(tmp, {"rltrain:workloads.allowRunRestart": True})
    cluster.reset_storage()
    lv = Live(cluster, workdir, request)
    up = lv.pulumi("up")
    assert not engine_warnings(up), engine_warnings(up)
    lv.rows = lv.offline()
    _runs_done(lv)
    yield lv
    lv.pulumi("destroy")


def _gpu_nodes(lv: Live, count: int) -> None:
    """The GPU nodes a new gpuNodes.count asks for, made first (as the node group would)."""
    existing = lv.cluster.get("v1", "Node", "gpu-p5-48xlarge-0")
    hw = unset_secrets.load_stack(lv.cluster.info["stack"])[2]
    region = existing["metadata"]["labels"]["topology.kubernetes.io/region"]
    for i in range(count):
        node = nodes_mod.gpu_node(hw, i, stack=lv.cluster.info["stack"], region=region)
        if lv.cluster.get("v1", "Node", node["metadata"]["name"]) is None:
            lv.cluster.api("/api/v1/nodes", "POST", node)


def _edit(lv: Live, group: list[key_sweep.Planned]) -> None:
    by_path = {k.path: k for k in key_sweep.keys()}
    lv.edit_stack(lambda c: [key_sweep.set_key(c, by_path[k], v) for p in group for k, v in p.edits().items()])
    for p in group:
        if p.key == "gpuNodes.count":
            _gpu_nodes(lv, p.value)


# Seen when one `up` recreates every run at once (a new priority class): a pod's create is refused
# by the ResourceQuota admission's optimistic update of the quota's usage ("the object has been
# modified", a 409 from kubernetes v1.35.4 staging/src/k8s.io/apiserver/pkg/admission/plugin/
# resourcequota/controller.go after its own retries); the Job controller creates the pod again
# (FailedCreate, then backoff), and the provider passes the Job's warning event on. The runs still
# finish (runs_done); the sweep prints it instead of failing on it.
QUOTA_CONFLICT = 'resourcequotas "gpu-quota": the object has been modified'


def _warnings(lv: Live, res: dict) -> list[str]:
    found = engine_warnings(res)
    for w in (w for w in found if QUOTA_CONFLICT in w):
        log(lv.request, f"sweep: transient (the Job controller retries): {w[:300]}")
    return [w for w in found if QUOTA_CONFLICT not in w]


def _runs_done(lv: Live) -> None:
    """Every run the stack has now finished (a key that turns a run off leaves it out)."""
    runs = [(r["inputs"]["kind"], r["inputs"]["metadata"]["name"], r["inputs"]["metadata"].get("namespace", NAMESPACE))
            for r in lv.rows if r["type"] in ("kubernetes:batch/v1:Job", "kubernetes:kubeflow.org/v2beta1:MPIJob")]

    def done() -> bool:
        return all(job_complete(lv.cluster, n, ns) if k == "Job" else mpijob_succeeded(lv.cluster, n, ns)
                   for k, n, ns in runs)
    wait(f"every run finished ({', '.join(n for _, n, _ in runs)})", done, RUNS_TIMEOUT,
         lambda: str({n: (lv.cluster.get("batch/v1", "Job", n, ns) or {}).get("status") for k, n, ns in runs
                      if k == "Job"}))


def _claim(lv: Live) -> tuple[str, str]:
    """(namespace, name) of the stack's claim in the last offline record."""
    [(ns, name)] = [(r["inputs"]["metadata"]["namespace"], r["inputs"]["metadata"]["name"]) for r in lv.rows
                    if r["type"] == "kubernetes:core/v1:PersistentVolumeClaim"]
    return ns, name


def _volume_of(lv: Live, ns: str, claim: str) -> dict:
    c = lv.cluster.get("v1", "PersistentVolumeClaim", claim, ns)
    assert c and c["status"].get("phase") == "Bound", (ns, claim, c and c.get("status"))
    return lv.cluster.get("v1", "PersistentVolume", c["spec"]["volumeName"])


def _moved_claim(lv: Live, before: tuple[str, str], volume: dict) -> str:
    """After an opted-in move of the claim: the new claim Bound to a volume of the class, the old
    volume deleted (reclaim Delete: its data went with the claim, what the opt-in accepted) or
    kept Released (Retain). Returns what happened to it."""
    new = _claim(lv)
    assert new != before, (new, before)
    wait(f"claim {new[0]}/{new[1]} Bound", lambda: ((lv.cluster.get("v1", "PersistentVolumeClaim", new[1], new[0])
                                                     or {}).get("status") or {}).get("phase") == "Bound", 60)
    fresh = _volume_of(lv, *new)
    assert fresh["metadata"]["name"] != volume["metadata"]["name"]
    assert fresh["spec"]["storageClassName"] == volume["spec"]["storageClassName"]
    name, policy = volume["metadata"]["name"], volume["spec"]["persistentVolumeReclaimPolicy"]
    if policy == "Delete":
        wait(f"the old claim's volume {name} deleted (reclaim Delete)",
             lambda: lv.cluster.get("v1", "PersistentVolume", name) is None, 60)
        return f"old volume {name} deleted (reclaim Delete); new claim bound to {fresh['metadata']['name']}"
    wait(f"the old claim's volume {name} Released (reclaim {policy})",
         lambda: ((lv.cluster.get("v1", "PersistentVolume", name) or {}).get("status") or {}).get("phase")
         == "Released", 60)
    return f"old volume {name} kept Released (reclaim {policy}); new claim bound to {fresh['metadata']['name']}"


def _line(p: key_sweep.Planned, offline: dict[str, str], real: dict[str, str], up: str) -> str:
    """The key's objects as this change found them (offline impact and real operation of each; an
    object an earlier change already removed shows as the same on both sides)."""
    kinds = ",".join(sorted({offline.get(n, "same") for n in p.changes}))
    ops = ",".join(sorted({real.get(n, "same") for n in p.changes}))
    return f"sweep: {p.key} offline={kinds} real={ops} up={up}"


def _refused_now(lv: Live, p: key_sweep.Planned, with_: tuple[key_sweep.Planned, ...] = ()) -> str:
    """Why the config refuses this key's value on top of the sweep's earlier changes (and the keys
    `with_` of its own change), "" if not: e.g. validation switched off once the NCCL test is off,
    while trainingAfterChecks still waits for them."""
    doc = yaml.safe_load((lv.project / "Pulumi.sim.yaml").read_text())
    by_path = {k.path: k for k in key_sweep.keys()}
    for q in (*with_, p):
        for k, v in q.edits().items():
            key_sweep.set_key(doc["config"], by_path[k], v)
    return key_sweep.refusal(doc, lv.project)


class Sweep:
    def __init__(self, lv: Live):
        self.lv, self.failures, self.outcomes, self.volumes = lv, [], {}, {}

    def apply(self, n: str, group: list[key_sweep.Planned]) -> bool:
        """One change: preview (compared), up, runs finished; False when `up` failed."""
        lv, t1 = self.lv, time.monotonic()
        what = f"sweep change {n} ({', '.join(p.key for p in group)})"
        before_doc = (lv.project / "Pulumi.sim.yaml").read_text()
        base = lv.rows
        moves = group[0].opt_in and "storage-claim" in group[0].changes
        claim = _claim(lv)
        volume = _volume_of(lv, *claim) if moves else None
        _edit(lv, group)
        refused = group[0].refused
        preview = lv.pulumi("preview", check=not refused)
        real: dict[str, str] = {}
        lv.kinds = {n: "refused" for n in group[0].changes} if refused else {}
        if preview["ok"]:
            assert not _warnings(lv, preview), _warnings(lv, preview)
            real = lv.compare(what, preview)  # fails on a disagreement
        if refused:
            up = lv.pulumi("up", check=False) if preview["ok"] else preview
            outcome = "refused" if not up["ok"] else "ok"
            # Undone: the stack file as before, and the state read back from the cluster (a failed
            # update leaves the refused inputs in the state: the next preview would show an update
            # back; tests/sim/test_day_two.py scenario 5 shows the same with `preview --refresh`).
            (lv.project / "Pulumi.sim.yaml").write_text(before_doc)
            lv.rows = base
            lv.pulumi("refresh")
            if up["ok"]:
                self.failures.append(f"{group[0].key}: the impact guard refuses it, but `up` applied it")
        else:
            up = lv.pulumi("up", check=False)
            outcome = "ok" if up["ok"] else "failed"
            if up["ok"]:
                assert not _warnings(lv, up), _warnings(lv, up)
                if moves:
                    self.volumes[group[0].key] = fate = _moved_claim(lv, claim, volume)
                    log(lv.request, f"sweep: {group[0].key} (with {group[0].opt_in}): {fate}")
                _runs_done(lv)
            else:
                self.failures.append(f"{what}: `up` failed where the impact said it applies: "
                                     f"{str(up.get('diagnostics') or up.get('error'))[:2000]}")
        for p in group:
            self.outcomes[p.key] = outcome
            log(lv.request, _line(p, lv.kinds, real, outcome))
        log(lv.request, f"sweep change {n}: {time.monotonic() - t1:.0f}s")
        return outcome != "failed"


def test_every_key_changed_applies_as_its_impact_says(live):
    t0 = time.monotonic()
    doc = yaml.safe_load((live.project / "Pulumi.sim.yaml").read_text())
    planned = key_sweep.plan("sim", live.project, doc)
    changes = key_sweep.groups(planned)
    swept = [p for p in planned if p.changes]
    log(live.request, f"sweep plan: {len(planned)} keys, {len(swept)} swept in {len(changes)} changes, "
                      f"{len(planned) - len(swept)} skipped ({time.monotonic() - t0:.0f}s to plan)")
    for p in planned:
        if p.skipped:
            log(live.request, f"sweep: {p.key} skipped: {p.skipped}")
    sweep, deferred = Sweep(live), []
    for n, group in enumerate(changes, 1):
        # Planned one by one against the base; applied one after the other, a value can be refused
        # with what came before: such a key waits until the end and goes alone.
        accepted: list[key_sweep.Planned] = []
        for p in group:
            (deferred if _refused_now(live, p, tuple(accepted)) else accepted).append(p)
        group = accepted
        if group and not sweep.apply(f"{n}/{len(changes)}", group):
            break  # the state no longer matches the plan: what follows would not mean anything
    else:
        for p in deferred:
            why = _refused_now(live, p)
            if why:
                sweep.outcomes[p.key] = "skipped"
                log(live.request, f"sweep: {p.key} skipped: refused after the sweep's earlier changes: {why}")
            elif not sweep.apply(f"deferred {p.key}", [p]):
                break
    log(live.request, f"sweep: {len(swept)} keys in {len(changes)} changes (+{len(deferred)} deferred), "
                      f"{len(planned) - len(swept)} skipped, {time.monotonic() - t0:.0f}s")
    assert not sweep.failures, "\n".join(sweep.failures)
    outcomes = sweep.outcomes
    # What issue 34 found by hand is in the sweep and applies: a priority (a new class, the runs
    # recreated with it) and an in-place change of admitted runs (no conflict on Kueue's nodeSelector).
    for key in ("workloads.priority", "workloads.validation.priority", "workloads.ncclTest.priority",
                "workloads.maxRunMinutes", "workloads.retries", "workloads.failFastExitCodes"):
        assert outcomes.get(key) == "ok", (key, outcomes.get(key))
    assert outcomes.get("storage.claimSizeGiB") == "refused", outcomes.get("storage.claimSizeGiB")
    # The claim moved twice with its opt-in (key_sweep.OPT_IN, in the models' order: its name, then
    # its namespace): first off the harness's static volume (Retain: kept), then off the volume the
    # provisioner made for the renamed claim (Delete: the data-loss the opt-in accepted, seen).
    assert [outcomes.get(k) for k in key_sweep.OPT_IN] == ["ok", "ok"], outcomes
    assert "kept Released (reclaim Retain)" in sweep.volumes["storage.claimName"], sweep.volumes
    assert "deleted (reclaim Delete)" in sweep.volumes["training.namespace"], sweep.volumes
    assert sum(o == "ok" for o in outcomes.values()) >= len(swept) - 3, outcomes
