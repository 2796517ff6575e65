#!/usr/bin/env python3
"""Offline checks of every manifest under deploy/kubernetes/ (no cluster needed or used).

1. Every file parses as YAML; every document has apiVersion, kind and a DNS-1123 metadata.name.
2. Schemas, strictly (an unknown field fails, as `kubectl apply --validate=strict` fails it):
   - agent-sandbox's kinds (SandboxTemplate, SandboxWarmPool, SandboxClaim) against the openAPIV3Schema
     of the CRDs vendored in tests/kubernetes/crds/ (kubernetes-sigs/agent-sandbox, see SOURCE.md), with
     every object that lists its properties closed to others (what the API server's pruning would
     silently drop, or strict field validation refuse);
   - every built-in kind, and each template's embedded pod template (as a core/v1 PodTemplate) and its
     metadata, against the Kubernetes 1.37 JSON schemas bundled in the PyPI package kubernetes-validate
     (`-local-strict` variants).
3. What no schema says, for these manifests to work with boxd's images:
   - each probe targets the image's public port, which `boxd init` (the images' PID 1) binds and
     `boxd serve` answers on: the one `EXPOSE` of images/base/Dockerfile, which must agree with the
     default of `boxd init --listen` in src/init/mod.rs; its path is a route boxd answers without the
     token (`/fastapi/livez`, `/fastapi/readyz/status`); probe ports, Service target ports and volume
     mounts name things that exist;
   - references resolve: a warm pool's template, a claim's warm pool, a Service's and a NetworkPolicy's
     selector select a Pod of the same file;
   - a device boxd reaches over TCP (BOXD_ADB_CONNECT) requires ADB authorization: boxd gets its key
     (BOXD_ADB_KEY) from a Secret as an env (secretKeyRef), never a literal nor the Secret mounted into
     boxd's container (tenant code reads every file there), and a redroid container in the pod runs
     with ro.adb.secure=1 (tenant code shares the pod's network and reaches adbd's port); the pool
     secret (BOXD_POOL_SECRET) follows the same rules;
   - for deploy/kubernetes/agent-sandbox/ and plain/ (ours; files others add get 1 and 2 and the checks
     above): every image type has a template and a warm pool, templates run boxd in pool mode
     (BOXD_POOL_SECRET from a secretKeyRef; no BOXD_POOL_SECRET_FILE, whose file tenant code could read;
     no SECRET_TOKEN) and refuse claim env (a cold start); boxd's container has
     a startup, liveness and readiness probe, requests and limits, no privilege escalation and all
     capabilities dropped but a listed few; every network policy is default-deny both ways, admits only
     the image's public port (TCP) in, and denies egress to private, link-local and shared ranges.

Not checked here (only a cluster can): that the images pull and start, that agent-sandbox's controller
accepts and reconciles the objects (its webhooks and controller-side rules), that the CNI enforces the
policies, and that the probes pass.

Usage: validate.py [ROOT]  (ROOT defaults to the repository's deploy/kubernetes). Exit status 1 on any
failure, with one line per failure.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import yaml
from referencing import Registry, Resource

REPO = Path(__file__).resolve().parents[2]
CRDS = Path(__file__).resolve().parent / "crds"
KUBERNETES_VERSION = "1.37.0"
IMAGE_TYPES = ("base", "gui", "browser", "filesystem", "mobile")
# Ours: the stricter boxd rules (3, last item) apply to these directories only.
OWN_DIRS = ("agent-sandbox", "plain")
# Routes boxd answers without the token on the image's public port (boxd serves its routes under
# /fastapi/, as the Python client calls them, and at the root).
TOKENLESS_PROBES = {"/fastapi/livez", "/fastapi/readyz/status"}
LIVENESS = "/fastapi/livez"
READINESS = "/fastapi/readyz/status"
# What boxd's container may keep of the default capabilities: boxd init binds port 80
# (NET_BIND_SERVICE); root in the container owns and chowns the workspace's files and signals its
# children (CHOWN, DAC_OVERRIDE, FOWNER, KILL). SETUID and SETGID served nginx's workers once; they stay
# for the tenant's own tools that switch users (su, sudo, apt's sandbox user).
ALLOWED_CAPABILITIES = {
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
}
# Egress must never reach these (cluster and node networks, metadata servers).
PRIVATE_RANGES = [
    ipaddress.ip_network(net)
    for net in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "fc00::/7",
        "fe80::/10",
    )
]
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class Manifest:
    """One YAML document and where it came from."""

    def __init__(self, path: Path, index: int, body: dict[str, Any], own: bool):
        self.path = path
        self.index = index
        self.body = body
        self.own = own

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))

    def where(self) -> str:
        return f"{self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path}#{self.index} {self.kind}/{self.name}"


# --- 2. schemas -------------------------------------------------------------------------------------


def closed(schema: Any) -> Any:
    """The schema with every object that lists its properties closed to unlisted ones (strict)."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: closed(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


@functools.lru_cache(maxsize=None)
def crd_schemas() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    """(apiVersion, kind) -> a validator of the closed openAPIV3Schema of every served version of the
    vendored CRDs."""
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = version["schema"]["openAPIV3Schema"]
                schemas[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(closed(schema))
    return schemas


def schema_errors(instance: Any, validator: jsonschema.Draft7Validator) -> Iterator[str]:
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(part) for part in error.absolute_path) or "(top)"
        yield f"{path}: {error.message}"


@functools.lru_cache(maxsize=None)
def kubernetes_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator | None:
    """kubernetes-validate's strict schema of (apiVersion, kind), loaded once (the package's own
    `validate` reloads its 5 MB of definitions on every call); None if it has none."""
    schema_dir = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    # The package's file naming: `networking.k8s.io/v1` -> `networking-v1`, `v1` stays `v1`.
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kubernetes_validate.utils.schema_contents(
            f"{schema_dir}/{kind.lower()}-{group_version}.json", KUBERNETES_VERSION
        )
    except FileNotFoundError:
        return None
    definitions = kubernetes_validate.utils.schema_contents(f"{schema_dir}/_definitions.json", KUBERNETES_VERSION)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def kubernetes_errors(body: dict[str, Any]) -> Iterator[str]:
    validator = kubernetes_validator(str(body.get("apiVersion")), str(body.get("kind")))
    if validator is None:
        yield (
            f"kubernetes-validate {kubernetes_validate.__version__} has no schema for "
            f"{body.get('apiVersion')} {body.get('kind')} in Kubernetes {KUBERNETES_VERSION}"
        )
        return
    for error in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(part) for part in error.absolute_path) or "(top)"
        yield f"{path}: {error.message}"


def check_schemas(manifest: Manifest, crds: dict) -> Iterator[str]:
    body = manifest.body
    key = (body.get("apiVersion"), manifest.kind)
    if key in crds:
        yield from schema_errors(body, crds[key])
        # The CRD leaves metadata open; hold it to ObjectMeta.
        yield from (
            f"metadata: {error}"
            for error in kubernetes_errors(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": body.get("metadata", {})}
            )
        )
        template = (body.get("spec") or {}).get("podTemplate")
        if manifest.kind == "SandboxTemplate" and template is not None:
            yield from (
                f"spec.podTemplate as a core/v1 PodTemplate: {error}"
                for error in kubernetes_errors(
                    {
                        "apiVersion": "v1",
                        "kind": "PodTemplate",
                        "metadata": {"name": manifest.name},
                        "template": template,
                    }
                )
            )
    elif str(body.get("apiVersion", "")).startswith("extensions.agents.x-k8s.io/") or str(
        body.get("apiVersion", "")
    ).startswith("agents.x-k8s.io/"):
        yield f"no vendored CRD schema for {key[0]} {key[1]} (tests/kubernetes/crds/)"
    else:
        yield from kubernetes_errors(body)


# --- 3. what boxd's images need ---------------------------------------------------------------------


def image_port(repo: Path = REPO) -> int:
    """The image's public port, which `boxd init` binds (and `boxd serve` answers on): the one
    `EXPOSE PORT` of images/base/Dockerfile (every image starts FROM it), cross-checked with the default
    of `boxd init --listen` in src/init/mod.rs. Exits with a message if either is missing or they
    disagree."""
    dockerfile = repo / "images" / "base" / "Dockerfile"
    init = repo / "src" / "init" / "mod.rs"
    try:
        dockerfile_text = dockerfile.read_text()
        init_text = init.read_text()
    except OSError as error:
        raise SystemExit(f"the image's public port: cannot read its sources: {error}") from None
    exposed = re.findall(r"^\s*EXPOSE\s+(.*?)\s*$", dockerfile_text, flags=re.MULTILINE | re.IGNORECASE)
    if len(exposed) != 1 or not re.fullmatch(r"\d+(/tcp)?", exposed[0], flags=re.IGNORECASE):
        raise SystemExit(
            f"{dockerfile}: expected one `EXPOSE PORT` (the port boxd init binds), found {exposed or 'none'}"
        )
    exposed_port = int(exposed[0].split("/")[0])
    # The clap attribute right before `pub listen: String`, e.g.
    # `#[arg(long, env = "BOXD_LISTEN", default_value = "0.0.0.0:80")]`.
    listen = re.findall(r"#\[arg\(([^\]]*)\)\]\s*pub\s+listen\s*:", init_text)
    defaults = [re.search(r'default_value\s*=\s*"([^"]*)"', args) for args in listen]
    if len(defaults) != 1 or defaults[0] is None or not re.fullmatch(r".*:(\d+)", defaults[0].group(1)):
        raise SystemExit(
            f"{init}: expected one `--listen` argument with a `default_value = \"ADDRESS:PORT\"` "
            f"(the address boxd init binds)"
        )
    listen_port = int(defaults[0].group(1).rsplit(":", 1)[1])
    if listen_port != exposed_port:
        raise SystemExit(
            f"the image's public port: {dockerfile} says EXPOSE {exposed_port} but boxd init binds "
            f"{defaults[0].group(1)} by default ({init}); make them agree"
        )
    return exposed_port


def pod_spec_of(manifest: Manifest) -> tuple[dict, dict] | None:
    """(pod labels, pod spec) of a Pod or a SandboxTemplate."""
    body = manifest.body
    if manifest.kind == "Pod":
        return (body.get("metadata") or {}).get("labels") or {}, body.get("spec") or {}
    if manifest.kind == "SandboxTemplate":
        template = (body.get("spec") or {}).get("podTemplate") or {}
        return (template.get("metadata") or {}).get("labels") or {}, template.get("spec") or {}
    return None


def resolve_port(container: dict, port: Any) -> int | None:
    if isinstance(port, int):
        return port
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return declared.get("containerPort")
    return None


def is_boxd(container: dict) -> bool:
    return "runtime-sandbox-" in str(container.get("image", ""))


def check_pod(manifest: Manifest, port: int) -> Iterator[str]:
    found = pod_spec_of(manifest)
    if found is None:
        return
    _labels, spec = found
    volumes = {volume.get("name") for volume in spec.get("volumes") or []}
    boxd_containers = 0
    for container in spec.get("containers") or []:
        name = container.get("name")
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                yield f"container {name}: volumeMount {mount.get('name')!r} names no volume"
        for probe_kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = container.get(probe_kind)
            if not probe or "httpGet" not in probe:
                continue
            get = probe["httpGet"]
            target = resolve_port(container, get.get("port"))
            if target is None:
                yield f"container {name}: {probe_kind} port {get.get('port')!r} is no port of the container"
            if is_boxd(container):
                if target != port:
                    yield (
                        f"container {name}: {probe_kind} must target the image's public port {port} "
                        f"(which boxd init binds), not {target}"
                    )
                if get.get("path") not in TOKENLESS_PROBES:
                    yield (
                        f"container {name}: {probe_kind} path {get.get('path')!r} is not a route boxd "
                        f"answers without the token ({sorted(TOKENLESS_PROBES)})"
                    )
        if not is_boxd(container):
            continue
        boxd_containers += 1
        yield from check_device_key(container, spec)
        yield from check_secret_env(container, spec, "BOXD_POOL_SECRET", "the pool secret")
        if port not in {p.get("containerPort") for p in container.get("ports") or []}:
            yield f"container {name}: does not declare the image's public port {port} (which boxd init binds)"
        if manifest.own:
            yield from check_own_boxd_container(manifest, container)
    if boxd_containers != 1:
        yield f"expected one boxd container (image docker.io/agentscope/runtime-sandbox-<type>), found {boxd_containers}"
    elif manifest.own and spec.get("automountServiceAccountToken") is not False:
        yield "automountServiceAccountToken must be false: nothing in a sandbox talks to the Kubernetes API"


def check_device_key(container: dict, spec: dict) -> Iterator[str]:
    """The device boxd drives answers boxd's key alone: tenant code runs in boxd's container and shares
    the pod's network, so adbd's port is within its reach; only the key keeps it out."""
    name = container.get("name")
    env = {item.get("name"): item for item in container.get("env") or []}
    if "BOXD_ADB_CONNECT" in env and "BOXD_ADB_KEY" not in env:
        yield (
            f"container {name}: BOXD_ADB_CONNECT without BOXD_ADB_KEY: the device must require ADB "
            f"authorization and trust boxd's key alone (tenant code can reach its port)"
        )
    if "BOXD_ADB_KEY" not in env:
        return
    yield from check_secret_env(container, spec, "BOXD_ADB_KEY", "the device key")
    for other in spec.get("containers") or []:
        if "redroid" in str(other.get("image", "")) and "ro.adb.secure=1" not in [
            str(arg) for arg in (other.get("args") or []) + (other.get("command") or [])
        ]:
            yield (
                f"container {other.get('name')}: redroid must run with ro.adb.secure=1 (its default is "
                f"no ADB authorization), or BOXD_ADB_KEY keeps nobody out"
            )


def check_secret_env(container: dict, spec: dict, variable: str, what: str) -> Iterator[str]:
    """A secret boxd alone may hold reaches it as an env from a Secret (secretKeyRef), which boxd init
    takes out of every other process's environment; never a literal (in the manifest for anyone who
    reads it), nor the same Secret mounted into boxd's container (tenant code reads every file there)."""
    name = container.get("name")
    item = {entry.get("name"): entry for entry in container.get("env") or []}.get(variable)
    if item is None:
        return
    secret = ((item.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
    if not secret:
        yield f"container {name}: {variable} must come from a Secret (valueFrom.secretKeyRef), not a literal"
    secret_volumes = {
        volume.get("name")
        for volume in spec.get("volumes") or []
        if secret and (volume.get("secret") or {}).get("secretName") == secret
    }
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") in secret_volumes:
            yield (
                f"container {name}: mounts the Secret {secret!r} that holds {variable}: tenant code "
                f"could read {what} from {mount.get('mountPath')}"
            )


def check_own_boxd_container(manifest: Manifest, container: dict) -> Iterator[str]:
    name = container.get("name")
    probes = {kind: (container.get(kind) or {}).get("httpGet", {}).get("path") for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    if probes["livenessProbe"] != LIVENESS:
        yield f"container {name}: livenessProbe must be {LIVENESS}"
    if probes["readinessProbe"] != READINESS:
        yield f"container {name}: readinessProbe must be {READINESS} (ready only when every family is)"
    if probes["startupProbe"] is None:
        yield f"container {name}: needs a startupProbe, so liveness does not count the start-up"
    resources = container.get("resources") or {}
    for bound in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            if resource not in (resources.get(bound) or {}):
                yield f"container {name}: resources.{bound}.{resource} is missing"
    context = container.get("securityContext") or {}
    if context.get("allowPrivilegeEscalation") is not False:
        yield f"container {name}: securityContext.allowPrivilegeEscalation must be false"
    if context.get("privileged"):
        yield f"container {name}: boxd's container must not be privileged"
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []):
        yield f"container {name}: securityContext.capabilities.drop must be [ALL]"
    extra = set(capabilities.get("add") or []) - ALLOWED_CAPABILITIES
    if extra:
        yield f"container {name}: capabilities {sorted(extra)} are more than boxd's image needs"
    env = {item.get("name"): item for item in container.get("env") or []}
    if manifest.kind == "SandboxTemplate":
        if "BOXD_POOL_SECRET" not in env:
            yield (
                f"container {name}: a pooled pod must run boxd in pool mode (env BOXD_POOL_SECRET from "
                f"a Secret's secretKeyRef)"
            )
        if "BOXD_POOL_SECRET_FILE" in env:
            yield (
                f"container {name}: BOXD_POOL_SECRET_FILE puts the pool secret in a file tenant code can "
                f"read; give it as the env BOXD_POOL_SECRET from a secretKeyRef instead"
            )
        if "SECRET_TOKEN" in env:
            yield f"container {name}: a pooled pod gets its token from POST /init, not SECRET_TOKEN"
    elif "SECRET_TOKEN" in env and "value" in env["SECRET_TOKEN"]:
        yield f"container {name}: SECRET_TOKEN must come from a Secret (valueFrom), not a literal"
    yield from check_sandboxd_addresses(name, env)


# The sandboxd family's listeners (agent-sandbox's runtime APIs) take no token: ours keep them on the
# container's loopback, where the SDK's pod port-forward reaches them and the NetworkPolicy need not.
SANDBOXD_ADDRESSES = ("SANDBOXD_GRPC_ADDR", "SANDBOXD_REST_ADDR")
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]"}


def check_sandboxd_addresses(name: str, env: dict) -> Iterator[str]:
    ports = []
    for variable in SANDBOXD_ADDRESSES:
        if variable not in env:
            continue
        value = str(env[variable].get("value", ""))
        host, _, port = value.rpartition(":")
        if host not in LOOPBACK_HOSTS or not port.isdigit() or not 0 < int(port) < 65536:
            yield (
                f"container {name}: {variable}={value!r} must be a loopback HOST:PORT "
                f"({sorted(LOOPBACK_HOSTS)}): the sandboxd listeners have no token"
            )
        ports.append(port)
    if len(ports) == 2 and ports[0] == ports[1]:
        yield f"container {name}: SANDBOXD_GRPC_ADDR and SANDBOXD_REST_ADDR need two ports"


def selects(selector: dict, labels: dict) -> bool:
    match = selector.get("matchLabels") or {}
    if selector.get("matchExpressions"):
        return False  # not used here; a selector we cannot evaluate does not count as selecting
    return bool(match) and all(labels.get(key) == value for key, value in match.items())


def check_network_rules(where: str, ingress: list, egress: list, api_port: int) -> Iterator[str]:
    if not ingress:
        yield f"{where}: no ingress rule admits the API port (everything, boxd's API too, is refused)"
    for rule in ingress:
        ports = rule.get("ports") or []
        if not ports:
            yield f"{where}: an ingress rule without ports admits every port (redroid's adbd too)"
        for port in ports:
            if port.get("port") != api_port or port.get("protocol", "TCP") != "TCP" or "endPort" in port:
                yield (
                    f"{where}: ingress admits {port}, only TCP {api_port} (the image's public port, "
                    f"which boxd init binds) should be reachable"
                )
        if not rule.get("from"):
            yield f"{where}: an ingress rule without `from` admits every source"
    for rule in egress:
        for peer in rule.get("to") or [{}]:
            block = peer.get("ipBlock")
            if block is None:
                yield f"{where}: an egress peer other than an ipBlock ({peer}) reaches inside the cluster"
                continue
            cidr = ipaddress.ip_network(block["cidr"])
            excepted = [ipaddress.ip_network(net) for net in block.get("except") or []]
            for private in PRIVATE_RANGES:
                if private.version != cidr.version or not private.subnet_of(cidr):
                    continue
                if not any(excepted_net.version == private.version and private.subnet_of(excepted_net) for excepted_net in excepted):
                    yield f"{where}: egress to {block['cidr']} does not except {private}"


def check_own(manifests: list[Manifest], port: int) -> Iterator[tuple[Manifest | None, str]]:
    own = [m for m in manifests if m.own]
    templates = {m.name: m for m in own if m.kind == "SandboxTemplate"}
    pools = {m.name: m for m in own if m.kind == "SandboxWarmPool"}
    for image_type in IMAGE_TYPES:
        image = f"docker.io/agentscope/runtime-sandbox-{image_type}:"
        matching = [
            m
            for m in templates.values()
            if any(str(c.get("image", "")).startswith(image) for c in (pod_spec_of(m) or ({}, {}))[1].get("containers") or [])
        ]
        if not matching:
            yield None, f"no SandboxTemplate runs {image}<tag>"
        elif not any(
            ((p.body.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name") in {m.name for m in matching}
            for p in pools.values()
        ):
            yield None, f"no SandboxWarmPool keeps pods of the {image_type} template"
    if not any(m.kind == "SandboxClaim" for m in own):
        yield None, "no example SandboxClaim"
    for template in templates.values():
        spec = template.body.get("spec") or {}
        if spec.get("envVarsInjectionPolicy", "Disallowed") != "Disallowed":
            yield template, "envVarsInjectionPolicy must be Disallowed: claim env is a cold start; env goes through POST /init"
        if spec.get("networkPolicyManagement", "Managed") != "Managed" or "networkPolicy" not in spec:
            yield template, "needs a managed networkPolicy admitting the API port"
        else:
            policy = spec["networkPolicy"]
            for problem in check_network_rules("networkPolicy", policy.get("ingress") or [], policy.get("egress") or [], port):
                yield template, problem
    for policy in (m for m in own if m.kind == "NetworkPolicy"):
        spec = policy.body.get("spec") or {}
        if set(spec.get("policyTypes") or []) != {"Ingress", "Egress"}:
            yield policy, "policyTypes must be [Ingress, Egress]: default deny both ways"
        for problem in check_network_rules("spec", spec.get("ingress") or [], spec.get("egress") or [], port):
            yield policy, problem
    for claim in (m for m in own if m.kind == "SandboxClaim"):
        spec = claim.body.get("spec") or {}
        if spec.get("env") or spec.get("volumeClaimTemplates"):
            yield claim, "a claim that sets env or volumes is a cold start in agent-sandbox"


def check_references(manifests: list[Manifest]) -> Iterator[tuple[Manifest, str]]:
    by_kind: dict[str, dict[str, Manifest]] = {}
    for m in manifests:
        by_kind.setdefault(m.kind, {})[m.name] = m
    for pool in by_kind.get("SandboxWarmPool", {}).values():
        ref = ((pool.body.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
        if ref not in by_kind.get("SandboxTemplate", {}):
            yield pool, f"sandboxTemplateRef {ref!r} names no SandboxTemplate in deploy/kubernetes"
    for claim in by_kind.get("SandboxClaim", {}).values():
        ref = ((claim.body.get("spec") or {}).get("warmPoolRef") or {}).get("name")
        if ref not in by_kind.get("SandboxWarmPool", {}):
            yield claim, f"warmPoolRef {ref!r} names no SandboxWarmPool in deploy/kubernetes"
    for m in manifests:
        if m.kind not in ("Service", "NetworkPolicy"):
            continue
        spec = m.body.get("spec") or {}
        selector = {"matchLabels": spec.get("selector") or {}} if m.kind == "Service" else spec.get("podSelector") or {}
        pods = [
            p
            for p in manifests
            if p.path == m.path and p.kind == "Pod" and selects(selector, (p.body.get("metadata") or {}).get("labels") or {})
        ]
        if not pods:
            yield m, "its selector selects no Pod of the same file"
        if m.kind == "Service":
            for service_port in spec.get("ports") or []:
                target = service_port.get("targetPort", service_port.get("port"))
                for pod in pods:
                    containers = (pod.body.get("spec") or {}).get("containers") or []
                    if not any(resolve_port(c, target) for c in containers):
                        yield m, f"targetPort {target!r} is no port of Pod {pod.name}"


# --- driver -----------------------------------------------------------------------------------------


def load(root: Path) -> tuple[list[Manifest], list[str]]:
    manifests, failures = [], []
    files = sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        failures.append(f"{root}: no manifests")
    for path in files:
        own = path.relative_to(root).parts[0] in OWN_DIRS
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as error:
            failures.append(f"{path}: does not parse: {error}")
            continue
        for index, body in enumerate(documents):
            if body is None:
                continue
            manifest = Manifest(path, index, body, own)
            if not isinstance(body, dict) or not body.get("apiVersion") or not body.get("kind"):
                failures.append(f"{manifest.where()}: needs apiVersion and kind")
                continue
            if not DNS_1123_SUBDOMAIN.match(manifest.name) or len(manifest.name) > 253:
                failures.append(f"{manifest.where()}: metadata.name must be a DNS-1123 subdomain")
            manifests.append(manifest)
    return manifests, failures


def validate(root: Path) -> tuple[list[Manifest], list[str]]:
    manifests, failures = load(root)
    crds = crd_schemas()
    port = image_port()
    for manifest in manifests:
        for problem in check_schemas(manifest, crds):
            failures.append(f"{manifest.where()}: schema: {problem}")
        for problem in check_pod(manifest, port):
            failures.append(f"{manifest.where()}: {problem}")
    for manifest, problem in check_references(manifests):
        failures.append(f"{manifest.where()}: {problem}")
    for manifest, problem in check_own(manifests, port):
        failures.append(f"{manifest.where() if manifest else root}: {problem}")
    return manifests, failures


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) > 1 else REPO / "deploy" / "kubernetes"
    manifests, failures = validate(root)
    for failure in failures:
        print(f"FAIL {failure}")
    kinds: dict[str, int] = {}
    for manifest in manifests:
        kinds[manifest.kind] = kinds.get(manifest.kind, 0) + 1
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    print(
        f"{len(manifests)} manifests ({summary}) under {root}: "
        f"{'OK' if not failures else f'{len(failures)} failures'} "
        f"(CRDs: agent-sandbox v0.5.6 vendored; Kubernetes {KUBERNETES_VERSION} schemas of kubernetes-validate "
        f"{kubernetes_validate.__version__})"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
