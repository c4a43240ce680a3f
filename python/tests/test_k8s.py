"""The Kubernetes deployment (deploy/k8s): rendered with `kubectl kustomize` for 1..8 nodes and
validated against the Kubernetes API schemas (kubernetes-validate, strict: unknown fields are
errors), and the rendezvous wiring checked: rank from the pod ordinal, node count equal to the
replica count, coordinator at pod 0 of the headless Service, token from a Secret, metrics port
annotated for scraping. Skipped without kubectl (kustomize is built into it)."""

import os
import pathlib
import shutil
import subprocess

import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

REPO = pathlib.Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "k8s"
# The pod-index label (ROAM_RANK) exists from Kubernetes 1.28 on; validate against it and the latest.
VERSIONS = ["1.28.0", kubernetes_validate.latest_version()]

REPLACEMENT = """
replacements:
  - source:
      kind: StatefulSet
      name: roam
      fieldPath: spec.replicas
    targets:
      - select:
          kind: StatefulSet
          name: roam
        fieldPaths:
          - spec.template.spec.containers.[name=roam].env.[name=ROAM_NUM_NODES].value
"""


def render(directory):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def overlay(tmp_path, nodes):
    """The overlay docs/launching.md shows, for `nodes` nodes."""
    directory = tmp_path / f"overlay-{nodes}"
    directory.mkdir()
    base = os.path.relpath(BASE, directory)
    (directory / "kustomization.yaml").write_text(
        f"resources: [{base}]\nreplicas: [{{name: roam, count: {nodes}}}]\n{REPLACEMENT}"
    )
    return directory


def by_kind(docs):
    kinds = {}
    for doc in docs:
        assert doc["kind"] not in kinds, f"two {doc['kind']} objects"
        kinds[doc["kind"]] = doc
    return kinds


def check_deployment(docs, nodes):
    for doc in docs:
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{doc['kind']} {doc['metadata']['name']} is invalid for Kubernetes {version}: {e}")
    kinds = by_kind(docs)
    assert set(kinds) == {"Service", "StatefulSet", "PodDisruptionBudget"}
    service, sts, pdb = kinds["Service"], kinds["StatefulSet"], kinds["PodDisruptionBudget"]

    assert sts["spec"]["replicas"] == nodes
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert service["spec"]["clusterIP"] == "None", "the Service must be headless"
    assert service["spec"]["publishNotReadyAddresses"] is True
    labels = sts["spec"]["template"]["metadata"]["labels"]
    for selector in (service["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()

    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["ROAM_NUM_NODES"]["value"] == str(nodes)
    rank = env["ROAM_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert rank == "metadata.labels['apps.kubernetes.io/pod-index']"
    coordinator_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "coordinator")
    pod0 = f"{sts['metadata']['name']}-0.{service['metadata']['name']}"
    assert env["ROAM_COORDINATOR"]["value"] == f"{pod0}:{coordinator_port}"
    assert env["ROAM_CLUSTER_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "token"

    metrics_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(metrics_port)
    assert env["ROAM_METRICS_ADDR"]["value"].endswith(f":{metrics_port}")


def test_the_base_renders_three_valid_nodes():
    check_deployment(render(BASE), 3)


@pytest.mark.parametrize("nodes", range(1, 9))
def test_an_overlay_renders_valid_manifests_for_any_node_count(tmp_path, nodes):
    check_deployment(render(overlay(tmp_path, nodes)), nodes)
