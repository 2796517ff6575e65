"""deploy/kubernetes/ passes tests/kubernetes/validate.py, and each of its checks catches the mistake it
is there for (a copy of the manifests, broken one way per case)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import validate  # noqa: E402

DEPLOY = validate.REPO / "deploy" / "kubernetes"


def test_the_deployed_manifests_pass():
    manifests, failures = validate.validate(DEPLOY)
    assert failures == []
    kinds = {m.kind for m in manifests}
    assert {"SandboxTemplate", "SandboxWarmPool", "SandboxClaim", "Pod", "Service", "NetworkPolicy"} <= kinds
    # The template of agent-sandbox's sandboxd runtime: our image with both sandboxd addresses set.
    sandboxd = [m for m in manifests if m.kind == "SandboxTemplate" and m.name == "boxd-base-sandboxd"]
    assert len(sandboxd) == 1
    env = {item["name"]: item.get("value") for item in boxd(sandboxd[0].body)["env"]}
    assert env["SANDBOXD_GRPC_ADDR"] == "localhost:9090" and env["SANDBOXD_REST_ADDR"] == "localhost:8080"


def edit(root: Path, relative: str, kind: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = root / relative
    documents = list(yaml.safe_load_all(path.read_text()))
    hits = [d for d in documents if d and d.get("kind") == kind]
    assert hits, f"no {kind} in {relative}"
    change(hits[0])
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))


def boxd(template: dict[str, Any]) -> dict[str, Any]:
    spec = template["spec"]["podTemplate"]["spec"] if template["kind"] == "SandboxTemplate" else template["spec"]
    return spec["containers"][0]


def set_path(obj: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    obj[last] = value


def env_named(container: dict[str, Any], name: str) -> dict[str, Any]:
    return next(item for item in container["env"] if item["name"] == name)


def mount_pool_secret(spec: dict[str, Any]) -> None:
    """The pool secret's Secret mounted into boxd's container as files (which tenant code could read)."""
    secret = env_named(spec["containers"][0], "BOXD_POOL_SECRET")["valueFrom"]["secretKeyRef"]["name"]
    spec["volumes"].append({"name": "pool-secret-files", "secret": {"secretName": secret}})
    spec["containers"][0]["volumeMounts"].append({"name": "pool-secret-files", "mountPath": "/var/run/boxd/pool"})


def pool_secret_in_a_file(spec: dict[str, Any]) -> None:
    """The older way: the Secret mounted and boxd pointed at the file."""
    mount_pool_secret(spec)
    container = spec["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != "BOXD_POOL_SECRET"]
    container["env"].append({"name": "BOXD_POOL_SECRET_FILE", "value": "/var/run/boxd/pool/pool-secret"})


def mount_key_secret(spec: dict[str, Any]) -> None:
    """The device key's Secret mounted into boxd's container as files (which tenant code could read)."""
    secret = env_named(spec["containers"][0], "BOXD_ADB_KEY")["valueFrom"]["secretKeyRef"]["name"]
    spec["volumes"].append({"name": "adb-key-files", "secret": {"secretName": secret}})
    spec["containers"][0]["volumeMounts"].append({"name": "adb-key-files", "mountPath": "/var/run/adb"})


CASES = [
    # (file, kind, change, expected words in a failure)
    ("agent-sandbox/base.yaml", "SandboxTemplate", lambda t: set_path(t, "spec.podTemplat", {}), "Additional properties"),
    ("agent-sandbox/base.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "livenesProbe", {}), "Additional properties"),
    ("agent-sandbox/gui.yaml", "SandboxWarmPool", lambda p: set_path(p, "spec.replicas", "two"), "is not of type 'integer'"),
    ("agent-sandbox/gui.yaml", "SandboxWarmPool", lambda p: set_path(p, "spec.updateStrategy.type", "Rolling"), "is not one of"),
    ("agent-sandbox/base.yaml", "SandboxTemplate", lambda t: set_path(t, "spec.envVarsInjectionPolicy", "Allowed"), "cold start"),
    ("agent-sandbox/base.yaml", "SandboxTemplate", lambda t: set_path(t["metadata"], "labels", {"a": 1}), "metadata"),
    ("agent-sandbox/browser.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "livenessProbe.httpGet.path", "/livez"), "not a route boxd answers"),
    ("agent-sandbox/browser.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "readinessProbe.httpGet.path", "/fastapi/healthz"), "without the token"),
    ("agent-sandbox/browser.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "readinessProbe.httpGet.port", 8000), "public port 80"),
    ("agent-sandbox/mobile.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "readinessProbe.httpGet.port", "web"), "no port of the container"),
    ("agent-sandbox/mobile.yaml", "SandboxTemplate", lambda t: boxd(t)["env"].append({"name": "SECRET_TOKEN", "value": "x"}), "POST /init"),
    ("agent-sandbox/mobile.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "env", []), "pool mode"),
    ("agent-sandbox/base.yaml", "SandboxTemplate", lambda t: set_path(env_named(boxd(t), "BOXD_POOL_SECRET"), "valueFrom", None) or set_path(env_named(boxd(t), "BOXD_POOL_SECRET"), "value", "0123456789abcdef0123"), "BOXD_POOL_SECRET must come from a Secret"),
    ("agent-sandbox/gui.yaml", "SandboxTemplate", lambda t: mount_pool_secret(t["spec"]["podTemplate"]["spec"]), "could read the pool secret"),
    ("agent-sandbox/browser.yaml", "SandboxTemplate", lambda t: pool_secret_in_a_file(t["spec"]["podTemplate"]["spec"]), "a file tenant code can read"),
    ("agent-sandbox/filesystem.yaml", "SandboxTemplate", lambda t: set_path(t, "spec.networkPolicy.ingress.0.ports", []), "admits every port"),
    ("agent-sandbox/filesystem.yaml", "SandboxTemplate", lambda t: set_path(t, "spec.networkPolicy.ingress.0.ports.0.port", 5555), "only TCP 80"),
    ("agent-sandbox/filesystem.yaml", "SandboxTemplate", lambda t: set_path(t, "spec.networkPolicy.egress.0.to.0.ipBlock.except", []), "does not except 10.0.0.0/8"),
    ("agent-sandbox/gui.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "securityContext.capabilities.add", ["SYS_ADMIN"]), "more than boxd's image needs"),
    ("agent-sandbox/gui.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "securityContext.allowPrivilegeEscalation", True), "allowPrivilegeEscalation"),
    ("agent-sandbox/gui.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "resources", {}), "resources.limits.memory"),
    ("agent-sandbox/gui.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "volumeMounts.0.name", "gone"), "names no volume"),
    ("agent-sandbox/claim-example.yaml", "SandboxClaim", lambda c: set_path(c, "spec.warmPoolRef.name", "boxd-none"), "names no SandboxWarmPool"),
    ("agent-sandbox/claim-example.yaml", "SandboxClaim", lambda c: set_path(c, "spec.env", [{"name": "A", "value": "b"}]), "cold start"),
    ("agent-sandbox/claim-example.yaml", "SandboxClaim", lambda c: set_path(c, "spec.warmPool", {"name": "x"}), "Additional properties"),
    ("agent-sandbox/base.yaml", "SandboxWarmPool", lambda p: set_path(p, "spec.sandboxTemplateRef.name", "boxd-none"), "names no SandboxTemplate"),
    ("agent-sandbox/sandboxd-base.yaml", "SandboxTemplate", lambda t: set_path(env_named(boxd(t), "SANDBOXD_GRPC_ADDR"), "value", "0.0.0.0:9090"), "no token"),
    ("agent-sandbox/sandboxd-base.yaml", "SandboxTemplate", lambda t: set_path(env_named(boxd(t), "SANDBOXD_REST_ADDR"), "value", "localhost:9090"), "two ports"),
    ("plain/base.yaml", "Pod", lambda p: set_path(p["spec"], "terminationGracePeriodSeconds", "soon"), "schema"),
    ("plain/base.yaml", "Pod", lambda p: set_path(boxd(p), "imagePullPolicy", 3), "schema"),
    ("plain/base.yaml", "Pod", lambda p: set_path(boxd(p), "unknownField", 1), "schema"),
    ("plain/base.yaml", "Pod", lambda p: set_path(boxd(p), "env", [{"name": "SECRET_TOKEN", "value": "literal"}]), "from a Secret"),
    ("plain/base.yaml", "Service", lambda s: set_path(s["spec"], "selector", {"app": "other"}), "selects no Pod"),
    ("plain/base.yaml", "Service", lambda s: set_path(s["spec"]["ports"][0], "targetPort", "api"), "targetPort 'api'"),
    ("plain/base.yaml", "NetworkPolicy", lambda n: set_path(n["spec"], "policyTypes", ["Ingress"]), "default deny both ways"),
    ("agent-sandbox/mobile.yaml", "SandboxTemplate", lambda t: set_path(boxd(t), "env", [e for e in boxd(t)["env"] if e["name"] != "BOXD_ADB_KEY"]), "without BOXD_ADB_KEY"),
    ("agent-sandbox/mobile.yaml", "SandboxTemplate", lambda t: set_path(env_named(boxd(t), "BOXD_ADB_KEY"), "valueFrom", None), "from a Secret (valueFrom.secretKeyRef)"),
    ("agent-sandbox/mobile.yaml", "SandboxTemplate", lambda t: mount_key_secret(t["spec"]["podTemplate"]["spec"]), "could read the device key"),
    ("agent-sandbox/mobile.yaml", "SandboxTemplate", lambda t: t["spec"]["podTemplate"]["spec"]["containers"][1]["args"].remove("ro.adb.secure=1"), "ro.adb.secure=1"),
    ("mobile-redroid-pod.yaml", "Pod", lambda p: p["spec"]["containers"][1]["args"].remove("ro.adb.secure=1"), "ro.adb.secure=1"),
    ("mobile-redroid-pod.yaml", "Pod", lambda p: set_path(env_named(boxd(p), "BOXD_ADB_KEY"), "valueFrom", None) or set_path(env_named(boxd(p), "BOXD_ADB_KEY"), "value", "-----BEGIN PRIVATE KEY-----"), "not a literal"),
    ("plain/base.yaml", "NetworkPolicy", lambda n: set_path(n["spec"]["egress"][0], "to", [{"namespaceSelector": {}}]), "reaches inside the cluster"),
]


@pytest.mark.parametrize("relative,kind,change,expected", CASES, ids=[f"{c[0]}:{c[3]}" for c in CASES])
def test_each_check_catches_its_mistake(tmp_path, relative, kind, change, expected):
    root = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, root)
    edit(root, relative, kind, change)
    _, failures = validate.validate(root)
    assert any(expected in failure for failure in failures), failures


def test_a_missing_image_type_and_unparsable_yaml_fail(tmp_path):
    root = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, root)
    (root / "agent-sandbox" / "browser.yaml").unlink()
    (root / "agent-sandbox" / "broken.yaml").write_text("kind: [unclosed\n")
    _, failures = validate.validate(root)
    assert any("runtime-sandbox-browser" in failure for failure in failures), failures
    assert any("does not parse" in failure for failure in failures), failures


def test_manifests_of_other_directories_get_the_schemas_but_not_our_hardening(tmp_path):
    """A file another part of the project adds (a plain Pod beside ours) must be valid Kubernetes with
    working probes; the pool-mode and hardening rules are those of agent-sandbox/ and plain/."""
    root = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, root)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other", "labels": {"app": "other"}},
        "spec": {
            "containers": [
                {
                    "name": "sandbox",
                    "image": "docker.io/agentscope/runtime-sandbox-mobile:latest",
                    "ports": [{"name": "http", "containerPort": 80}],
                    "readinessProbe": {"httpGet": {"path": "/fastapi/readyz/status", "port": "http"}},
                }
            ]
        },
    }
    (root / "other.yaml").write_text(yaml.safe_dump(pod))
    assert validate.validate(root)[1] == []
    pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] = "/readyz"
    (root / "other.yaml").write_text(yaml.safe_dump(pod))
    assert any("not a route boxd answers" in f for f in validate.validate(root)[1])


def test_the_public_port_comes_from_the_dockerfile_and_boxd_init():
    """The port the probes, Services and policies must use is the one the images expose and `boxd init`
    binds by default; a source that lacks it, or two that disagree, stop the validation with a message."""
    assert validate.image_port() == 80


def fake_repo(root: Path, dockerfile: str | None, init: str | None) -> Path:
    if dockerfile is not None:
        (root / "images" / "base").mkdir(parents=True)
        (root / "images" / "base" / "Dockerfile").write_text(dockerfile)
    if init is not None:
        (root / "src" / "init").mkdir(parents=True)
        (root / "src" / "init" / "mod.rs").write_text(init)
    return root


LISTEN = '''    #[arg(long, env = "BOXD_LISTEN", default_value = "0.0.0.0:{port}")]
    pub listen: String,
'''


@pytest.mark.parametrize(
    "dockerfile,init,expected",
    [
        ("FROM x\nEXPOSE 8080\n", LISTEN.format(port=80), "make them agree"),
        ("FROM x\n", LISTEN.format(port=80), "expected one `EXPOSE PORT`"),
        ("FROM x\nEXPOSE 80\nEXPOSE 81\n", LISTEN.format(port=80), "expected one `EXPOSE PORT`"),
        ("FROM x\nEXPOSE 80\n", "pub struct InitArgs {}\n", "`--listen`"),
        ("FROM x\nEXPOSE 80\n", '#[arg(long, env = "BOXD_LISTEN")]\n    pub listen: String,\n', "`--listen`"),
        ("FROM x\nEXPOSE 80\n", None, "cannot read"),
        (None, LISTEN.format(port=80), "cannot read"),
    ],
    ids=["disagree", "no-expose", "two-exposes", "no-listen", "no-default", "no-init", "no-dockerfile"],
)
def test_the_public_port_fails_clearly(tmp_path, dockerfile, init, expected):
    with pytest.raises(SystemExit, match=re.escape(expected)):
        validate.image_port(fake_repo(tmp_path, dockerfile, init))
    assert validate.image_port(fake_repo(tmp_path / "good", "FROM x\nEXPOSE 80/tcp\n", LISTEN.format(port=80))) == 80
