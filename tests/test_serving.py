"""Serving (components/workloads/serving.py), its evaluation CronJob, the schedule and impact
integration, and the kubelet topology policies - through the offline render of p5 variants."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from support import SERVING_P5, obj, rendered
from test_config import load, problems
from test_kueue_support import load_variant, variant, write_variant

from components.offline import impact, numa, policy, render, schedule
from components.stack import fit, topology
from components.workloads import env, evaluation, serving, trainer

SCRIPT = Path(__file__).resolve().parent.parent / "components" / "scripts" / "evaluate.py"


def edits(**serving_patch):
    e = copy.deepcopy(SERVING_P5)
    e["rltrain:workloads"]["serving"].update(serving_patch)
    return e


@pytest.fixture(scope="module")
def served():
    return variant("p5", SERVING_P5)


def rules(r, name):
    return [v for v in policy.evaluate(r.resources) if v.rule == name]


# --- config ---------------------------------------------------------------------------------------

def serving_cfg(**patch):
    s = {"enabled": True, "model": {"run": "single-node", "step": 50}, **patch}
    return {"workloads": {"image": "repo/rl:1.0", "trainer": "rlinf-reasoning", "validation": {"enabled": False},
                          "serving": s}}


def test_serving_is_off_by_default_and_adds_nothing_to_the_shipped_renders():
    assert load().workloads.serving.enabled is False
    for stack in ("p5", "dev"):
        kinds = {(m["kind"], m["metadata"]["name"]) for m in rendered(stack).manifests}
        assert ("Deployment", serving.NAME) not in kinds and ("CronJob", evaluation.NAME) not in kinds


def test_tensor_parallel_other_than_gpus_per_replica_is_refused_naming_the_key():
    found = problems(overrides=serving_cfg(gpusPerReplica=4, tensorParallelSize=2))
    assert any(path == "rltrain:workloads.serving.tensorParallelSize" and "gpusPerReplica 4" in msg
               for path, msg in found.items()), found


def test_gpus_per_replica_must_divide_the_node():
    found = problems(overrides=serving_cfg(gpusPerReplica=3))
    assert any(path == "rltrain:workloads.serving.gpusPerReplica" and "1, 2, 4, 8" in msg for path, msg in found.items())


@pytest.mark.parametrize("arg", ["--model=/fsx/other", "--tensor_parallel_size=2", "--port=9000", "-tp=2",
                                 "--max-model-len=4096"])
def test_extra_args_may_not_repeat_a_flag_the_program_sets(arg):
    found = problems(overrides=serving_cfg(extraArgs=["--enforce-eager", arg]))
    assert any(path == "rltrain:workloads.serving.extraArgs[1]" and "set by the program" in msg
               for path, msg in found.items()), found


def test_extra_args_of_other_flags_pass_through():
    cfg = load(serving_cfg(extraArgs=["--enforce-eager", "--dtype=bfloat16"]))
    assert serving.server_args(cfg)[-2:] == ["--enforce-eager", "--dtype=bfloat16"]


@pytest.mark.parametrize("model, key", [({}, "rltrain:workloads.serving.model"),
                                        ({"run": "single-node"}, "rltrain:workloads.serving.model.step"),
                                        ({"run": "single-node", "step": 1, "path": "/fsx/m"},
                                         "rltrain:workloads.serving.model")])
def test_model_source_must_be_a_run_with_a_step_or_a_path(model, key):
    found = problems(overrides={"workloads": {"image": "repo/rl:1.0", "validation": {"enabled": False},
                                              "serving": {"enabled": True, "model": model}}})
    assert key in found, found


def test_more_replicas_than_the_node_group_holds_are_refused():
    found = problems(overrides=serving_cfg(gpusPerReplica=8, replicas=3, model={"path": "/fsx/m"}))
    assert "hold (1 per node)" in found["rltrain:workloads.serving.replicas"]
    assert load(serving_cfg(gpusPerReplica=4, replicas=4, **{})).workloads.serving.replicas == 4


def test_checks_spanning_every_node_are_refused_beside_serving():
    found = problems(overrides={"workloads": {"image": "repo/rl:1.0", "ncclTest": {"enabled": True},
                                              "serving": {"enabled": True, "model": {"path": "/fsx/m"}}}})
    assert "never start" in found["rltrain:workloads.ncclTest.enabled"]
    assert "never start" in found["rltrain:workloads.validation.enabled"]


def test_evaluation_needs_serving():
    found = problems(overrides={"workloads": {"image": "repo/rl:1.0",
                                              "serving": {"evaluation": {"enabled": True}}}})
    assert "rltrain:workloads.serving.evaluation.enabled" in found


# --- the model follows training -------------------------------------------------------------------

def test_model_path_is_the_runs_checkpoint_directory_at_the_step():
    # A profiled trainer's step is served from what its export writes: the run's directory's twin under
    # /fsx/exports (exported to S3 whenever a bucket is set), outside the steps the retention prunes.
    single = load(serving_cfg(model={"run": "single-node", "step": 50}))
    multi = load({"workloads": {"image": "repo/rl:1.0", "trainer": "rlinf-reasoning", "multiNode": {"enabled": True},
                                "validation": {"enabled": False},
                                "serving": {"enabled": True, "model": {"run": "multi-node", "step": 50}}}})
    assert serving.model_path(single) == f"/fsx/exports{env.checkpoint_dir(single, 1)[len('/fsx/runs'):]}/global_step_50"
    assert serving.model_path(multi) == f"/fsx/exports{env.checkpoint_dir(multi, 2)[len('/fsx/runs'):]}/global_step_50"
    assert serving.model_path(single) != serving.model_path(multi)
    # Export off: the step's checkpointLayout as it is (an export made some other way).
    raw = load(serving_cfg(model={"run": "single-node", "step": 50}, export={"enabled": False}))
    assert serving.model_path(raw) == f"{trainer.steps_dir(raw, env.checkpoint_dir(raw, 1))}/global_step_50/actor/huggingface"
    fixed = load(serving_cfg(model={"path": "/fsx/models/base"}))
    assert serving.model_path(fixed) == "/fsx/models/base"


def test_the_render_shows_the_served_path_and_step(served):
    d = obj(served, "Deployment", serving.NAME)
    path = serving.model_path(served.cfg)
    assert path == f"/fsx/exports{env.checkpoint_dir(served.cfg, 2)[len('/fsx/runs'):]}/global_step_200"
    assert d["metadata"]["annotations"][serving.MODEL_ANNOTATION] == path
    assert d["metadata"]["labels"][serving.STEP_LABEL] == "200"
    tmpl = d["spec"]["template"]
    assert tmpl["metadata"]["labels"][serving.RUN_LABEL] == "multi-node"
    assert f"--model={path}" in tmpl["spec"]["containers"][0]["args"]
    assert any(path in line for line in render.summary(served).splitlines() if line.strip().startswith("serving:"))
    out = served.result.stack_outputs["serving"]
    assert out["modelPath"] == path and out["endpoint"] == "http://rltrain-serving.rltrain.svc:8000"


def _step_change():
    # One stack name for both records (the cluster's name follows it).
    proj = write_variant("p5", "p5-serving-step", SERVING_P5)
    before = render.render_stack("p5-serving-step", proj)
    write_variant("p5", "p5-serving-step", edits(model={"run": "multi-node", "step": 250}))
    after = render.render_stack("p5-serving-step", proj)
    return before, after, impact.classify(before.resources, after.resources, after.cfg)


def test_a_new_served_checkpoint_is_a_serving_restart_and_a_new_export_only():
    _, _, found = _step_change()
    kinds = {(i.type.split(":")[-1], i.name): i.kind for i in found}
    assert kinds[("Deployment", "workloads-serving-deployment")] == impact.SERVING_RESTART
    # The new step gets its own export Job (rltrain-export-step-250) in place of the old one's; no
    # training run is touched.
    export_objs = [i for i in found if i.name.startswith("workloads-export-")]
    assert {i.name for i in export_objs} == {"workloads-export-job", "workloads-export-netpol"}
    assert not [i for i in found if i not in export_objs and i.kind in (
        impact.RUN_RESTART, impact.REPLACE, impact.NODE_ROLL, impact.DATA_LOSS, impact.DELETE, impact.CREATE)], found


def test_a_new_served_checkpoint_needs_no_opt_in():
    """A new step re-runs the export (a new export Job: nothing is lost) and rolls the replicas."""
    before, after, _ = _step_change()
    assert impact.check(before.resources, after.resources, after.cfg).refused == []
    kinds = {i.name: i.kind for i in impact.classify(before.resources, after.resources, after.cfg)}
    assert kinds["workloads-export-job"] == impact.CHECK_RERUN, kinds
    assert impact.RUN_RESTART not in kinds.values(), kinds


# --- the Deployment -------------------------------------------------------------------------------

def test_objects_of_the_p5_serving_render(served):
    names = {(m["kind"], m["metadata"]["name"]) for m in served.manifests}
    for kind in ("Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"):
        assert (kind, serving.NAME) in names
    assert ("CronJob", evaluation.NAME) in names
    assert ("PodMonitor", "rltrain-serving") in names
    svc = obj(served, "Service", serving.NAME)["spec"]
    assert svc["selector"] == {"rltrain/run": serving.NAME}
    assert svc["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]


def test_schema_valid_against_kubernetes_1_35_strict(served):
    errors = []
    for doc in served.manifests:
        if doc["kind"] in ("Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "CronJob"):
            try:
                kubernetes_validate.validate(doc, "1.35.0", strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {e.message}")
    assert errors == []


def test_startup_budget_is_derived_from_model_size_and_fsx_throughput(served):
    cfg = served.cfg
    fsx = cfg.storage.fsx
    mb_s = fsx.per_unit_storage_throughput * fsx.storage_capacity_gib / 1024  # 500 MB/s/TiB x 4.7 TiB
    # The export's bf16 weights of the 1.78 B parameter model: 3.3 GiB, two replicas at once.
    gib = 1_777_088_000 * 2 / 2**30
    assert serving.weights_gib(cfg) == gib
    load_s = gib * 1024 * 2 / mb_s
    want = math.ceil((serving.ENGINE_INIT_SECONDS + 2 * load_s) / 10) * 10
    c = obj(served, "Deployment", serving.NAME)["spec"]["template"]["spec"]["containers"][0]
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == want == 310
    bigger = load_variant("p5", edits(model={"run": "multi-node", "step": 250, "sizeGiB": 640}))
    assert serving.startup_budget_seconds(bigger) > 2 * want


def test_liveness_cannot_kill_a_loading_server(served):
    c = obj(served, "Deployment", serving.NAME)["spec"]["template"]["spec"]["containers"][0]
    # Kubernetes holds liveness and readiness until the startup probe succeeded; all three on /health.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    live = c["livenessProbe"]
    budget = c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"]
    assert live["periodSeconds"] * live["failureThreshold"] < budget  # the load is the startup probe's


def test_shm_tensor_parallel_and_graceful_shutdown(served):
    spec = obj(served, "Deployment", serving.NAME)["spec"]["template"]["spec"]
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm == {"medium": "Memory", "sizeLimit": "5Gi"}  # 2 GiB + 1 per further rank of TP 4
    c = spec["containers"][0]
    assert "--tensor-parallel-size=4" in c["args"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert c["resources"]["limits"]["cpu"] == c["resources"]["requests"]["cpu"]  # Guaranteed
    assert "vpc.amazonaws.com/efa" not in c["resources"]["limits"]
    assert spec["terminationGracePeriodSeconds"] > served.cfg.workloads.serving.max_request_seconds \
        + c["lifecycle"]["preStop"]["sleep"]["seconds"]


def test_placed_like_the_training_pods(served):
    spec = obj(served, "Deployment", serving.NAME)["spec"]["template"]["spec"]
    training = obj(served, "Job", "rltrain-training")["spec"]["template"]["spec"]
    assert spec["affinity"]["nodeAffinity"] == training["affinity"]["nodeAffinity"]
    assert "nodeSelector" not in spec and "nodeSelector" not in training
    assert spec["tolerations"] == training["tolerations"]
    # Two 4-GPU replicas fit one p5: packed (preferred), not one per node.
    assert "podAffinity" in spec["affinity"] and "podAntiAffinity" not in spec["affinity"]
    whole = load_variant("p5", edits(gpusPerReplica=8, replicas=1, model={"path": "/fsx/models/big"}))
    assert fit.one_replica_per_node(whole)


def test_network_policy_admits_the_namespace_and_the_monitoring_scrape_only(served):
    spec = obj(served, "NetworkPolicy", serving.NAME)["spec"]
    froms = [rule["from"][0] for rule in spec["ingress"]]
    assert {"podSelector": {}} in froms
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}} in froms
    assert all(rule["ports"] == [{"port": 8000, "protocol": "TCP"}] for rule in spec["ingress"])


def test_pdb_keeps_serving_during_node_rolls(served):
    pdb = obj(served, "PodDisruptionBudget", serving.NAME)["spec"]
    assert pdb == {"maxUnavailable": 1, "selector": {"matchLabels": {"rltrain/run": serving.NAME}}}


# --- rollout from free capacity -------------------------------------------------------------------

def test_full_node_group_switches_to_replace_one_at_a_time(served):
    strategy = obj(served, "Deployment", serving.NAME)["spec"]["strategy"]
    # 3 p5: the 2-node run on two, both replicas fill the third: no room for a surge pod.
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert rules(served, "rollout-fits") == []


def test_surges_when_a_whole_replica_fits():
    cfg = load_variant("p5", edits(replicas=1))
    r = serving.rollout_strategy(cfg)
    assert (r.max_surge, r.max_unavailable) == (1, 0)
    # The surge's GPUs are left out of the Kueue quota too: 24 - (1 + 1) x 4.
    from components.k8s import kueue
    assert kueue.nominal_quota(cfg, serving.reserved(cfg))["nvidia.com/gpu"] == "16"


def test_a_forced_surge_onto_a_full_node_group_is_refused():
    r = variant("p5", edits(rollout="surge"))
    found = rules(r, "rollout-fits")
    assert [v.resource for v in found] == [f"Deployment/{serving.NAME}"]
    assert "stays Pending" in found[0].message


# --- schedule and fit -----------------------------------------------------------------------------

def test_serving_pods_are_in_the_schedule_and_the_fit_report(served):
    lines = policy.fit_report(served.resources)
    # Sized from the model, not a share of the node: 2 + 2 x 4 CPUs; 4 GiB of weights (3.3 rounded up)
    # + 5 GiB /dev/shm (2 + 3 further TP ranks) + 6 GiB allowance.
    assert any(line.strip().startswith(f"Deployment/{serving.NAME}: 10 CPU, 15.0 GiB") and "4 GPU" in line
               for line in lines), lines
    s = schedule.simulate(served.resources)
    assert s.outcome(serving.NAME).status == schedule.SERVES
    assert s.outcome("rltrain-multinode").status == schedule.RUNS_NOW
    assert any("Deployment/rltrain-serving" in line and "serves" in line for line in lines)
    assert rules(served, "schedule-fits") == []


def test_a_stack_where_training_cannot_run_beside_serving_is_refused():
    # Shipped p5: 2 nodes, the multi-node run takes both; one replica takes 4 GPUs of one.
    r = variant("p5", {"rltrain:workloads": {"validation": {"enabled": False}, "ncclTest": {"enabled": False},
                                             "serving": {"enabled": True, "gpusPerReplica": 4,
                                                         "model": {"path": "/fsx/models/openvla-7b"}}}})
    found = rules(r, "schedule-fits")
    assert [v.resource for v in found] == ["Job/rltrain-multinode"]
    assert "serving" in found[0].message


# --- NUMA / topology ------------------------------------------------------------------------------

def node_config(r):
    """{setting: value} the GPU node groups' templates agree on (one GPU group: its template's);
    None when the record has no launch template (a bring-your-own cluster)."""
    per = numa.template_policies(r.resources)
    if per is None:
        return None
    found = [s for s in per.values() if s] or [{}]
    return {k: v for k, v in found[0].items() if all(s.get(k) == v for s in found)}


def test_policies_are_chosen_from_the_pod_shapes(served):
    assert node_config(rendered("p5")) == {"cpuManagerPolicy": "none", "topologyManagerPolicy": "best-effort"}
    assert node_config(served) == {"cpuManagerPolicy": "static", "topologyManagerPolicy": "best-effort"}
    assert topology.gpus_per_numa_node(served.cfg.gpu_nodes.instance) == 4


def test_single_numa_node_with_a_whole_node_training_pod_is_refused():
    r = variant("p5", {"rltrain:gpuNodes": {"topology": {"topologyManagerPolicy": "single-numa-node"}}})
    assert node_config(r)["topologyManagerPolicy"] == "single-numa-node"
    found = rules(r, "numa-policy-admits")
    assert "Job/rltrain-training" in {v.resource for v in found}
    assert all("TopologyAffinityError" in v.message for v in found)


def test_single_numa_node_admits_a_replica_that_fits_one_numa_node():
    r = variant("p5", edits(gpusPerReplica=2, replicas=1))
    spec = copy.deepcopy(r.resources)
    for x in spec:
        if x["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and x["inputs"].get("userData"):
            import base64
            text = base64.b64decode(x["inputs"]["userData"]).decode().replace("best-effort", "single-numa-node")
            x["inputs"]["userData"] = base64.b64encode(text.encode()).decode()
    found = {v.resource for v in policy.evaluate(spec, ["numa-policy-admits"])}
    assert f"Deployment/{serving.NAME}" not in found and "Job/rltrain-training" in found


# --- the evaluation CronJob -----------------------------------------------------------------------

def test_evaluation_cronjob(served):
    cj = obj(served, "CronJob", evaluation.NAME)["spec"]
    assert cj["concurrencyPolicy"] == "Forbid"
    assert cj["successfulJobsHistoryLimit"] == 3 and cj["failedJobsHistoryLimit"] == 3
    job = cj["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == 60 * 60
    c = job["template"]["spec"]["containers"][0]
    assert c["command"] == ["python3", "/scripts/evaluate.py"]
    out = f"{env.checkpoint_dir(served.cfg, 2)}/eval"
    assert f"--out-dir={out}" in c["args"] and "--label=step-200" in c["args"]
    assert "--endpoint=http://rltrain-serving.rltrain.svc:8000" in c["args"]
    mounts = {v["name"] for v in job["template"]["spec"]["volumes"]}
    assert {"fsx", "scripts"} <= mounts


class _Server(BaseHTTPRequestHandler):
    model = "exp"

    def log_message(self, *a):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self._send(404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions" or body.get("temperature") != 0:
            self._send(400, {"error": "bad request"})
            return
        text = " 4" if "2+2" in body["prompt"] else " no idea"
        self._send(200, {"choices": [{"text": text, "index": 0}], "usage": {"completion_tokens": 2}})


@pytest.fixture()
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def run_eval(tmp_path, endpoint, model="exp", prompts=None):
    p = tmp_path / "prompts.jsonl"
    p.write_text(prompts if prompts is not None else
                 '{"prompt": "2+2=", "expected": "4"}\n\n{"prompt": "capital of Mars?", "expected": "none"}\n'
                 '{"prompt": "say hi"}\n')
    return subprocess.run([sys.executable, str(SCRIPT), f"--endpoint={endpoint}", f"--model={model}",
                           f"--prompts={p}", f"--out-dir={tmp_path / 'eval'}", "--label=step-7"],
                          capture_output=True, text=True, timeout=60)


def test_evaluate_writes_results_beside_the_checkpoints(tmp_path, server):
    done = run_eval(tmp_path, server)
    assert done.returncode == 0, done.stderr
    [out] = list((tmp_path / "eval").glob("eval-step-7-*.json"))
    result = json.loads(out.read_text())
    s = result["summary"]
    assert (s["prompts"], s["judged"], s["correct"], s["accuracy"]) == (3, 2, 1, 0.5)
    assert s["completion_tokens"] == 6
    assert [r.get("correct") for r in result["results"]] == [True, False, None]
    assert "EVAL DONE: 3 prompts, 1/2 correct" in done.stdout
    assert not list((tmp_path / "eval").glob("*.tmp"))


def test_evaluate_refuses_a_model_the_server_does_not_serve(tmp_path, server):
    done = run_eval(tmp_path, server, model="other")
    assert done.returncode == 1 and "is not served" in done.stderr
    assert not (tmp_path / "eval").exists()


def test_evaluate_unreachable_server_and_bad_input(tmp_path):
    assert run_eval(tmp_path, "http://127.0.0.1:9").returncode == 1
    bad = run_eval(tmp_path, "http://127.0.0.1:9", prompts='{"prompt": 3}\n')
    assert bad.returncode == 2 and "prompts.jsonl:1" in bad.stderr


# --- checkov --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_checkov_finds_nothing_in_the_serving_objects_and_each_skip_is_a_real_failure(served, tmp_path):
    from components.offline import scan_report
    from components.k8s import security
    exe = scan_report.checkov_executable()
    if exe is None:
        pytest.skip("checkov not installed (RLTRAIN_CHECKOV)")
    docs = [d for d in served.manifests if d["kind"] in ("Deployment", "Service", "PodDisruptionBudget",
                                                         "NetworkPolicy", "CronJob")]
    bare = copy.deepcopy(docs)
    for d in bare:  # the same objects without their skips, in a namespace of their own
        d["metadata"]["namespace"] = "noskip"
        d["metadata"]["annotations"] = {k: v for k, v in (d["metadata"].get("annotations") or {}).items()
                                        if not k.startswith(security.SKIP_PREFIX)}
    (tmp_path / "serving.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    (tmp_path / "noskip.yaml").write_text(yaml.safe_dump_all(bare, sort_keys=False))
    out = subprocess.run([exe, "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json", "--quiet"],
                         capture_output=True, text=True, timeout=900)
    report = json.loads(out.stdout)
    report = report[0] if isinstance(report, list) else report
    failed = report["results"].get("failed_checks") or []
    assert [c for c in failed if c["file_path"].endswith("/serving.yaml")] == []
    failing = {(c["resource"].split(".")[0], c["check_id"]) for c in failed}
    skips = {(d["kind"], check) for d in docs
             for check in security.parse(d["metadata"].get("annotations"))}
    assert skips and failing == skips  # every skip hides a real failure, nothing else fails


def test_nodeadm_node_config_carries_the_kubelet_policies():
    from components.aws.gpu_nodes import GpuNodeGroupArgs, node_config_yaml
    base = dict(cluster_name="c", instance_type="p5.48xlarge", count=2, efa=True, root_volume_gib=500,
                root_volume_throughput=1000, root_volume_iops=16000, local_storage_raid0=False, fast_image_pull=False)
    # Graceful node shutdown on every GPU node (components/stack/node_repair.py), the policies when set.
    shutdown = {"shutdownGracePeriod": "3630s", "shutdownGracePeriodCriticalPods": "30s"}
    assert yaml.safe_load(node_config_yaml(GpuNodeGroupArgs(**base)))["spec"] == {"kubelet": {"config": shutdown}}
    doc = yaml.safe_load(node_config_yaml(GpuNodeGroupArgs(**base, cpu_manager_policy="static",
                                                           topology_manager_policy="best-effort")))
    assert doc["kind"] == "NodeConfig"
    assert doc["spec"]["kubelet"]["config"] == {"cpuManagerPolicy": "static", "topologyManagerPolicy": "best-effort",
                                                **shutdown}


def test_per_gpu_memory_counts_the_kv_heads_vllm_copies_past_their_number():
    """vLLM gives each rank max(1, kv_heads // tp) KV heads (v0.11.0 vllm/config/model.py
    get_num_kv_heads): Qwen2.5-1.5B has 2, so at tensor parallel 4 a GPU holds half the cache."""
    from components.stack.trainers import QWEN2_5_1_5B as m
    tokens = 32768
    weights, kv = m.weights_gib(2), m.kv_cache_gib(tokens)
    assert m.per_gpu_gib(tokens, 1) == pytest.approx(weights + kv)
    assert m.per_gpu_gib(tokens, 2) == pytest.approx(weights / 2 + kv / 2)
    assert m.per_gpu_gib(tokens, 4) == pytest.approx(weights / 4 + kv / 2)
    assert m.per_gpu_gib(tokens, 4) > (weights + kv) / 4
