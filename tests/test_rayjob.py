"""The KubeRay RayJob form of multi-node training (`multiNode.form: rayjob`, components/workloads/rayjob.py,
components/k8s/kuberay.py): the p5 RayJob, its operator, its policies, its place in the queue and its
lifecycle; the rayVersion checks; Ray metrics on every Ray form. The RayJob against the KubeRay 1.6.2
CRD fields: tests/test_rayjob_schema.py."""

from __future__ import annotations

import shlex

import pytest
from support import rendered
from test_kueue_support import load_variant, variant, write_variant

from components.k8s import kuberay, kueue, monitoring
from components.offline import deploy_model, policy, render, schedule
from components.offline.resources import Pod, pod_requests, pods
from components.stack import validate, versions
from components.workloads import env as env_mod
from components.workloads import multinode, rayjob, runs

RAYJOB = {"enabled": True, "form": "rayjob", "rayVersion": "2.60.0"}
P5_RAYJOB = {"rltrain:workloads": {"multiNode": RAYJOB}}
GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"


def the_rayjob(r):
    [job] = [m for m in r.manifests if m["kind"] == "RayJob"]
    return job


def templates(job):
    cluster = job["spec"]["rayClusterSpec"]
    return {"head": cluster["headGroupSpec"]["template"],
            **{g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]}}


def ray_container(template):
    [c] = template["spec"]["containers"]
    return c


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def release(r):
    found = [x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release"
             and x["inputs"]["chart"] == versions.KUBERAY_OPERATOR.chart]
    return found[0] if found else None


def problems_of(base, edits):
    with pytest.raises(validate.ConfigError) as e:
        load_variant(base, edits)
    return e.value.problems


# --- done when: p5 -------------------------------------------------------------------------------


def test_p5_rayjob_head_and_one_worker_each_a_whole_p5_node():
    r = variant("p5", P5_RAYJOB)
    job = the_rayjob(r)
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    [workers] = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 1
    for name, template in templates(job).items():
        res = ray_container(template)["resources"]
        for key, n in ((GPU, 8), (EFA, 32)):
            assert str(res["requests"][key]) == str(res["limits"][key]) == str(n), (name, key)


def test_p5_rayjob_run_settings():
    r = variant("p5", P5_RAYJOB)
    cfg, spec = r.cfg, the_rayjob(r)["spec"]
    assert spec["entrypoint"] == shlex.join(["python3", "/scripts/resume_wrapper.py", "--", *cfg.workloads.command])
    assert spec["submissionMode"] == "HTTPMode"
    assert spec["activeDeadlineSeconds"] == runs.deadline_seconds(cfg)
    assert spec["backoffLimit"] == cfg.workloads.retries
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == "2.60.0"
    # KubeRay generates the token per Ray cluster and injects it; the pods never carry it themselves.
    assert cluster["authOptions"] == {"mode": "token"}
    assert "enableInTreeAutoscaling" not in cluster and "suspend" not in spec  # Kueue owns suspend


def test_ray_pods_come_from_the_training_pod_builder():
    r = variant("p5", P5_RAYJOB)
    job = the_rayjob(r)
    for name, template in templates(job).items():
        pod = template["spec"]
        c = ray_container(template)
        assert "command" not in c and "args" not in c, name  # KubeRay writes `ray start`
        assert c["name"] == runs.CONTAINER
        assert pod["restartPolicy"] == "Never"
        assert pod["priorityClassName"] == runs.priority_class(r.cfg)
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/dev/shm", "/fsx"}
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"
        e = env(c)
        assert e["CKPT_DIR"] == env_mod.checkpoint_dir(r.cfg, 2) and e["RESUME"] == "auto"
        assert e["HF_TOKEN"] == {"secretKeyRef": {"name": "training-secrets", "key": "hfToken", "optional": False}}
        assert not {"RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RAY_HEAD_HOST", "RAY_START_EXTRA_ARGS"} & set(e)
        assert template["metadata"]["labels"][runs.RUN_LABEL] == rayjob.RUN
        # One pod per node: the run's required anti-affinity, as every multi-node form.
        [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"


def test_head_ports_under_kuberays_names_and_metrics_everywhere():
    job = the_rayjob(variant("p5", P5_RAYJOB))
    t = templates(job)
    head = {p["name"]: p["containerPort"] for p in ray_container(t["head"])["ports"]}
    assert head == {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}
    assert {p["name"]: p["containerPort"] for p in ray_container(t["workers"])["ports"]} == {"metrics": 8080}
    # One port of 8080 per container: KubeRay's head Service copies the head's ports and adds
    # `metrics` 8080 unless a port has that name; two Service ports of 8080 are invalid.
    for template in t.values():
        assert [p["containerPort"] for p in ray_container(template)["ports"]].count(8080) == 1
    cluster = job["spec"]["rayClusterSpec"]
    for params in (cluster["headGroupSpec"]["rayStartParams"], cluster["workerGroupSpecs"][0]["rayStartParams"]):
        assert params["metrics-export-port"] == "8080" and params["disable-usage-stats"] == "true"
    assert cluster["headGroupSpec"]["rayStartParams"]["port"] == "6379"
    assert cluster["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"


def test_launcher_forms_export_ray_metrics_on_the_port_monitoring_scrapes():
    assert (multinode.RAY_METRICS_PORT, multinode.RAY_METRICS_PORT_NAME) == (
        monitoring.RAY_METRICS_PORT, monitoring.RAY_METRICS_PORT_NAME)
    assert rayjob.METRICS_PORT == monitoring.RAY_METRICS_PORT
    r = rendered("p5")
    [job] = [m for m in r.manifests if m["kind"] == "Job" and m["metadata"]["name"] == multinode.RUN]
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert c["ports"] == [{"name": "ray-metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert shlex.split(env(c)["RAY_START_EXTRA_ARGS"]) == ["--metrics-export-port=8080"]
    sts = variant("p5", {"rltrain:kueue": {"enabled": False},
                         "rltrain:workloads": {"multiNode": {"enabled": True, "form": "statefulset"},
                                               "env": {"RAY_START_EXTRA_ARGS": "--num-cpus=180"}}})
    [ss] = [m for m in sts.manifests if m["kind"] == "StatefulSet"]
    [c] = ss["spec"]["template"]["spec"]["containers"]
    assert c["ports"][0]["name"] == monitoring.RAY_METRICS_PORT_NAME
    # workloads.env's own arguments are kept; the metrics port comes last, so it wins.
    assert shlex.split(env(c)["RAY_START_EXTRA_ARGS"]) == ["--num-cpus=180", "--metrics-export-port=8080"]


def test_queued_whole_head_and_workers_as_one_group():
    r = variant("p5", P5_RAYJOB)
    job = the_rayjob(r)
    assert job["metadata"]["labels"][kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE
    for template in templates(job).values():
        a = template["metadata"]["annotations"]
        assert a[kueue.PREFERRED_TOPOLOGY] == kueue.NEAREST_LAYER
        assert a[rayjob.PODSET_GROUP_ANNOTATION] == rayjob.PODSET_GROUP
    s = schedule.simulate(r.resources)
    o = s.outcome(rayjob.RUN)
    assert o.status != schedule.NEVER and o.workload.pods == 2
    # HTTPMode: no submitter pod set; the head and the worker group only.
    assert [p.name for p in o.workload.pod_sets] == ["head", "workers"]
    assert not [v for v in policy.evaluate(r.resources) if v.rule in ("kueue-queue", "schedule-fits")]


@pytest.mark.parametrize("mode,sets", [
    (None, ["head", "workers", "submitter"]),  # the CRD's default, K8sJobMode
    ("K8sJobMode", ["head", "workers", "submitter"]),
    ("HTTPMode", ["head", "workers"]),
    ("SidecarMode", ["head", "workers"]),
])
def test_schedule_counts_the_pod_sets_kueue_makes_of_a_rayjob(mode, sets):
    job = the_rayjob(variant("p5", P5_RAYJOB))
    spec = {k: v for k, v in job["spec"].items() if k != "submissionMode"}
    if mode:
        spec["submissionMode"] = mode
    found = schedule._templates({**job, "spec": spec})
    assert [name for name, *_ in found] == sets
    head_containers = found[0][2]["spec"]["containers"]
    assert len(head_containers) == (2 if mode == "SidecarMode" else 1)
    if "submitter" in sets:
        tmpl = found[-1][2]
        req = pod_requests(Pod("", "RayJob", 1, tmpl["spec"], {}))
        assert req == {"cpu": 0.5, "memory": 200 * 2**20}


def test_kuberay_operator_installed_by_the_cluster_wide_rule():
    rel = release(variant("p5", P5_RAYJOB))
    assert rel is not None
    i = rel["inputs"]
    assert (i["chart"], i["version"], i["repositoryOpts"]["repo"]) == (
        "kuberay-operator", "1.6.2", "https://ray-project.github.io/kuberay-helm/")
    assert i["namespace"] == versions.KUBERAY_NAMESPACE and i["createNamespace"] is True
    assert i["skipAwait"] is False
    assert release(rendered("p5")) is None  # the indexed-job form needs no operator
    byo = dict(RAYJOB)
    assert release(variant("byo", {"rltrain:workloads": {"multiNode": byo}})) is None  # opt-in on byo
    assert release(variant("byo", {"rltrain:workloads": {"multiNode": {**byo, "installKubeRay": True}}}))
    assert release(variant("p5", {"rltrain:workloads": {"multiNode": {**RAYJOB, "installKubeRay": False}}})) is None


def test_rayjob_after_its_operator_queue_and_policies_and_replaced_on_change():
    r = variant("p5", P5_RAYJOB)
    [row] = [x for x in r.resources if x["type"] == "kubernetes:ray.io/v1:RayJob"]
    graph = deploy_model.Graph(r.resources)
    rel = release(r)
    local_queue = next(x for x in r.resources if x["type"] == "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")
    for target in (rel, local_queue):
        assert graph.reaches(deploy_model.ref(row), {deploy_model.ref(target)}), target["name"]
    names = {x["inputs"]["metadata"]["name"] for x in r.resources if x["type"].endswith(":NetworkPolicy")
             or x["type"].endswith(":PodDisruptionBudget")}
    assert {"rltrain-multinode-rayjob", "rltrain-multinode-dashboard"} <= names
    assert "rltrain-multinode" not in names  # the launcher forms' names: a form switch never clashes
    assert set(row["options"]["replaceOnChanges"]) >= {"spec", "metadata.labels"}
    assert row["options"]["deleteBeforeReplace"] is True
    assert row["inputs"]["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    # No launcher, no headless Service of its own: KubeRay creates the head Service.
    assert not [m for m in r.manifests if m["kind"] == "Service" and m["metadata"]["name"].startswith("rltrain-multi")]
    assert not [m for m in r.manifests if m["kind"] == "ConfigMap" and "ray-launcher" in m["metadata"]["name"]]


def test_only_the_operator_reaches_the_heads_dashboard():
    def dashboard(r):
        [p] = [m for m in r.manifests if m["kind"] == "NetworkPolicy"
               and m["metadata"]["name"] == "rltrain-multinode-dashboard"]
        return p["spec"]

    spec = dashboard(variant("p5", P5_RAYJOB))
    assert spec["podSelector"]["matchLabels"] == {runs.RUN_LABEL: rayjob.RUN, "ray.io/node-type": "head"}
    assert spec["policyTypes"] == ["Ingress"]
    [rule] = spec["ingress"]
    assert rule["ports"] == [{"port": 8265, "protocol": "TCP"}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}},
                             "podSelector": {"matchLabels": kuberay.OPERATOR_POD_LABELS}}]
    # The cluster's own KubeRay (byo, not installed by the stack): its operator pods, any namespace.
    [rule] = dashboard(variant("byo", {"rltrain:workloads": {"multiNode": RAYJOB}}))["ingress"]
    assert rule["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": kuberay.OPERATOR_POD_LABELS}}]


def test_own_token_from_secret_config_through_auth_options():
    r = variant("p5", {"rltrain:workloads": {"multiNode": {**RAYJOB, "rayAuthTokenSecret": "hfToken"}}})
    job = the_rayjob(r)
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token", "secretName": "rltrain-multinode-ray-token"}
    [secret] = [m for m in r.manifests if m["kind"] == "Secret" and m["metadata"]["name"] == "rltrain-multinode-ray-token"]
    assert set(secret["stringData"]) == {"auth_token"}
    for template in templates(job).values():
        assert "RAY_AUTH_TOKEN" not in env(ray_container(template))  # KubeRay injects it from that Secret


# --- config --------------------------------------------------------------------------------------


TAGGED = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:20260401-ray2.60.0"


def test_ray_version_disagreeing_with_the_image_tag_is_refused_with_its_key_path():
    p = problems_of("p5", {"rltrain:workloads": {"image": TAGGED, "multiNode": {**RAYJOB, "rayVersion": "2.50.0"}}})
    msgs = dict(p)
    assert "disagrees with the Ray version of workloads.image" in msgs["rltrain:workloads.multiNode.rayVersion"]
    assert "2.60.0" in msgs["rltrain:workloads.multiNode.rayVersion"]
    # The agreeing version is accepted.
    cfg = load_variant("p5", {"rltrain:workloads": {"image": TAGGED, "multiNode": RAYJOB}})
    assert cfg.workloads.multi_node.ray_version == "2.60.0"


def test_the_render_refuses_a_disagreeing_ray_version_with_exit_2(tmp_path, capsys):
    # The CLI's main() in this process (its exit code and output; the CLI as a program: test_render_cli.py).
    proj = write_variant("p5", "p5-rayver", {"rltrain:workloads": {
        "image": TAGGED, "multiNode": {**RAYJOB, "rayVersion": "2.61.0"}}})
    code = render.main(["--stack", "p5-rayver", "--project-dir", str(proj), "--out", str(tmp_path / "out"),
                        "--accept-impact"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "rltrain:workloads.multiNode.rayVersion" in out + err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edits,where,words", [
    ({"multiNode": {"enabled": True, "form": "rayjob"}}, "rltrain:workloads.multiNode.rayVersion",
     "required with multiNode.form rayjob"),
    ({"multiNode": {**RAYJOB, "rayVersion": "2.51.0"}}, "rltrain:workloads.multiNode.rayVersion",
     "below 2.52.0"),
    ({"multiNode": {**RAYJOB, "rayVersion": "2.60"}}, "rltrain:workloads.multiNode.rayVersion",
     "a Ray version MAJOR.MINOR.PATCH"),
    ({"multiNode": {"enabled": True, "rayVersion": "2.60.0"}}, "rltrain:workloads.multiNode.rayVersion",
     "has no effect with multiNode.form indexed-job"),
    ({"multiNode": {"enabled": True, "installKubeRay": True}}, "rltrain:workloads.multiNode.installKubeRay",
     "has no effect with multiNode.form indexed-job"),
    ({"multiNode": {**RAYJOB, "nodeWaitSeconds": 600}}, "rltrain:workloads.multiNode.nodeWaitSeconds",
     "has no effect with multiNode.form rayjob"),
    ({"multiNode": {"enabled": True, "form": "rayjobs"}}, "rltrain:workloads.multiNode.form",
     "indexed-job, statefulset, rayjob"),
])
def test_rayjob_config_refusals(edits, where, words):
    p = problems_of("p5", {"rltrain:workloads": edits})
    assert any(path == where and words in msg for path, msg in p), p


@pytest.mark.parametrize("image,version", [
    ("rayproject/ray:2.60.0-py311-gpu", "2.60.0"),
    ("docker.io/rayproject/ray-ml:2.52.1", "2.52.1"),
    ("localhost:5000/ray:2.60.0", "2.60.0"),
    (TAGGED, "2.60.0"),
    ("r.example/rl/train:ray-2.52.1-cu128", "2.52.1"),
    ("r.example/rl/verl:ngc-th2.7-rayv2.47", "2.47"),
    ("r.example/rl/train:v1-ray2.60.0@sha256:" + "0" * 64, "2.60.0"),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:20260401-085549", None),
    ("r.example/rl/train:array1.2.3", None),
    ("rayproject/ray:nightly-gpu", None),
    ("r.example/rl/train@sha256:" + "0" * 64, None),
])
def test_image_ray_version(image, version):
    assert validate.image_ray_version(image) == version


def test_a_two_part_tag_version_agrees_with_its_patch_releases():
    cfg = load_variant("p5", {"rltrain:workloads": {"image": "r.example/rl/verl:ngc-rayv2.60",
                                                    "multiNode": {**RAYJOB, "rayVersion": "2.60.1"}}})
    assert cfg.workloads.multi_node.ray_version == "2.60.1"


def test_policy_rules_and_fit_report_see_the_rayjob_pods():
    """The RayJob's head and workers are GPU pods like any other: sized, placed, isolated."""
    r = variant("p5", P5_RAYJOB)
    owners = {p.owner for p in pods(r.resources)}
    assert "RayJob/rltrain-multinode/head" in owners
    assert len([o for o in owners if o.startswith("RayJob/rltrain-multinode/")]) == 2
    assert policy.evaluate(r.resources) == []
    fit = "\n".join(policy.fit_report(r.resources))
    assert "RayJob/rltrain-multinode/head: 187 CPU" in fit
    # Breaking the head's EFA request is now caught like any other pod's.
    rows = r.resources
    job = next(x for x in rows if x["inputs"].get("kind") == "RayJob")
    head = job["inputs"]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"]["limits"][EFA] = head["resources"]["requests"][EFA] = "4"
    assert [v.rule for v in policy.evaluate(rows, rules=["efa-count"])] == ["efa-count"]


def test_podmonitor_scrapes_kuberays_metrics_port_too():
    pm = monitoring.ray_podmonitor_spec(monitoring.MonitoringArgs.model_construct(training_namespace="rltrain"))
    assert [e["port"] for e in pm["podMetricsEndpoints"]] == ["ray-metrics", "metrics"]
