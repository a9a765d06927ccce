#!/usr/bin/env python3
"""Checks the deployment files under deploy/ (a `make test` step: offline, about a second).

- Every YAML document under deploy/k8s/ except kustomization.yaml validates against the
  Kubernetes JSON schemas that ship inside the kubernetes-validate wheel, strictly (an unknown or
  misspelt field fails), for each version in KUBERNETES_VERSIONS.
- kustomization.yaml lists files that exist, and every manifest file exactly once.
- Structural assertions on what the server, the README and the other manifests rely on: probe
  paths, the preStop lame-duck command, replicas and routes, PDB, security context, mounts that
  match the paths in the config file, and so on (see check_statefulset and friends).
- deploy/compose/docker-compose.yml parses and has the three services, each with its own volume.
- deploy/docker/Dockerfile and .dockerignore have the expected shape. The image itself is not
  built here: the project's machines have no Docker daemon.

Usage: .venv/bin/python scripts/validate-manifests.py
Prints every problem found and exits 1 if there is any.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "deploy" / "compose"
DOCKER = ROOT / "deploy" / "docker"

# The oldest Kubernetes minor we claim to support, and the newest the pinned
# kubernetes-validate knows. Passed explicitly so a library upgrade cannot change the target.
KUBERNETES_VERSIONS = ("1.30", "1.37")

NAME = "jetraft"  # StatefulSet, headless Service (peer DNS) and PDB
CLIENT_SERVICE = "jetraft-client"
CONFIG_MAP = "jetraft-config"
REPLICAS = 3
PORTS = {"nats": 4222, "cluster": 6222, "monitor": 8222}
CONFIG_ARGS = ["--config", "/etc/jetraft/jetraft.conf"]
PROBES = {
    "startupProbe": "/healthz",
    "readinessProbe": "/healthz?js-server-only=true",
    "livenessProbe": "/healthz?js-enabled-only=true",
}


class Problems:
    """Collects failed checks so that one run reports all of them."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.checks = 0

    def expect(self, ok: object, where: str, what: str) -> bool:
        self.checks += 1
        if not ok:
            self.items.append(f"{where}: {what}")
        return bool(ok)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def load_documents(path: Path, p: Problems) -> list[dict]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        p.expect(False, rel(path), f"not valid YAML: {e}")
        return []
    for i, d in enumerate(docs):
        p.expect(isinstance(d, dict), f"{rel(path)}[{i}]", "document is not a mapping")
    return [d for d in docs if isinstance(d, dict)]


# ---------------------------------------------------------------------------------------------
# Kubernetes


def check_schemas(docs: list[tuple[Path, dict]], p: Problems) -> None:
    for path, doc in docs:
        where = f"{rel(path)} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        for version in KUBERNETES_VERSIONS:
            try:
                used = kubernetes_validate.validate(doc, version, strict=True)
                p.expect(used == version, where, f"validated against {used}, not {version}")
            except kubernetes_validate.ValidationError as e:
                field = ".".join(str(x) for x in e.path) or "(document)"
                p.expect(False, where, f"Kubernetes {version} schema: {field}: {e.message}")
            except (kubernetes_validate.SchemaNotFoundError,
                    kubernetes_validate.InvalidSchemaError) as e:
                p.expect(False, where, f"Kubernetes {version}: {e.message}")


def check_kustomization(p: Problems) -> None:
    path = K8S / "kustomization.yaml"
    docs = load_documents(path, p)
    if not p.expect(len(docs) == 1, rel(path), "expected one document"):
        return
    k = docs[0]
    where = rel(path)
    p.expect(k.get("apiVersion") == "kustomize.config.k8s.io/v1beta1", where, "apiVersion")
    p.expect(k.get("kind") == "Kustomization", where, "kind is not Kustomization")
    resources = k.get("resources") or []
    p.expect(len(resources) == len(set(resources)), where, "a resource is listed twice")
    for r in resources:
        p.expect((K8S / r).is_file(), where, f"resource {r!r} does not exist")
    listed = {(K8S / r).resolve() for r in resources}
    for f in manifest_files():
        p.expect(f.resolve() in listed, where, f"{rel(f)} is not listed in resources")
    images = {i.get("name"): i for i in k.get("images") or []}
    p.expect(NAME in images, where, f"no images entry for {NAME!r} (the StatefulSet's image)")


def manifest_files() -> list[Path]:
    files = sorted(K8S.rglob("*.yaml")) + sorted(K8S.rglob("*.yml"))
    return [f for f in files if f.name not in ("kustomization.yaml", "kustomization.yml")]


def find(docs: list[dict], kind: str, name: str, p: Problems) -> dict:
    found = [d for d in docs if d.get("kind") == kind and d.get("metadata", {}).get("name") == name]
    p.expect(len(found) == 1, "deploy/k8s", f"expected one {kind} {name!r}, found {len(found)}")
    return found[0] if found else {}


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_k8s(docs: list[dict], p: Problems) -> None:
    sts = find(docs, "StatefulSet", NAME, p)
    cm = find(docs, "ConfigMap", CONFIG_MAP, p)
    headless = find(docs, "Service", NAME, p)
    client = find(docs, "Service", CLIENT_SERVICE, p)
    pdb = find(docs, "PodDisruptionBudget", NAME, p)
    if not sts:
        return
    pod_labels = sts.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
    config = check_statefulset(sts, cm, p)
    check_services(headless, client, pod_labels, p)

    where = "PodDisruptionBudget/jetraft"
    p.expect(pdb.get("spec", {}).get("maxUnavailable") == 1, where, "maxUnavailable is not 1")
    p.expect(selects(pdb.get("spec", {}).get("selector", {}).get("matchLabels"), pod_labels),
             where, "selector does not match the StatefulSet's pods")

    if config is not None:
        hosts = [f"{NAME}-{i}.{headless.get('metadata', {}).get('name')}" for i in range(REPLICAS)]
        check_routes(config, hosts, "ConfigMap/jetraft-config jetraft.conf", p)


def check_statefulset(sts: dict, cm: dict, p: Problems) -> ConfigText | None:
    """Checks the StatefulSet; returns the config file it mounts (from the ConfigMap)."""
    where = "StatefulSet/jetraft"
    spec = sts.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    meta = spec.get("template", {}).get("metadata", {})
    p.expect(spec.get("replicas") == REPLICAS, where, f"replicas is not {REPLICAS}")
    p.expect(spec.get("serviceName") == NAME, where, f"serviceName is not {NAME!r}")
    p.expect(spec.get("podManagementPolicy") == "Parallel", where,
             "podManagementPolicy is not Parallel (a fresh cluster needs every peer up)")
    p.expect(selects(spec.get("selector", {}).get("matchLabels"), meta.get("labels", {})),
             where, "selector does not match the pod template's labels")

    annotations = meta.get("annotations", {})
    for key, want in (("prometheus.io/scrape", "true"), ("prometheus.io/port", "8222"),
                      ("prometheus.io/path", "/metrics")):
        p.expect(annotations.get(key) == want, where, f"pod annotation {key} is not {want!r}")

    containers = pod.get("containers", [])
    c = next((c for c in containers if c.get("name") == NAME), None)
    if not p.expect(c is not None, where, f"no container named {NAME!r}"):
        return None
    p.expect(c.get("args") == CONFIG_ARGS, where, f"container args are not {CONFIG_ARGS}")
    env = {e.get("name"): e for e in c.get("env", [])}
    for var, field in (("SERVER_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        got = env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        p.expect(got == field, where, f"env {var} is not the fieldRef {field}")
    ports = {cp.get("name"): cp.get("containerPort") for cp in c.get("ports", [])}
    p.expect(ports == PORTS, where, f"container ports are {ports}, expected {PORTS}")

    for probe, path in PROBES.items():
        get = c.get(probe, {}).get("httpGet", {})
        p.expect(get.get("path") == path, where, f"{probe} path is not {path!r}")
        port = get.get("port")
        p.expect(ports.get(port, port) == 8222, where, f"{probe} port is not the monitor port")
    startup = c.get("startupProbe", {})
    p.expect(startup.get("failureThreshold", 3) * startup.get("periodSeconds", 10) >= 300, where,
             "startupProbe allows less than 5 minutes to start")

    sc_pod = pod.get("securityContext", {})
    sc = c.get("securityContext", {})
    p.expect(sc_pod.get("runAsNonRoot") is True, where, "pod runAsNonRoot is not true")
    p.expect(sc_pod.get("runAsUser") == 1000, where, "pod runAsUser is not 1000")
    p.expect(sc_pod.get("fsGroup") == 1000, where, "pod fsGroup is not 1000 (volume not writable)")
    p.expect(sc.get("readOnlyRootFilesystem") is True, where, "readOnlyRootFilesystem is not true")
    p.expect(sc.get("allowPrivilegeEscalation") is False, where,
             "allowPrivilegeEscalation is not false")
    p.expect("ALL" in sc.get("capabilities", {}).get("drop", []), where,
             "capabilities do not drop ALL")

    res = c.get("resources", {})
    p.expect({"cpu", "memory"} <= set(res.get("requests", {})), where, "no cpu/memory requests")
    p.expect("memory" in res.get("limits", {}), where, "no memory limit")

    anti = pod.get("affinity", {}).get("podAntiAffinity", {})
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", []) + [
        t.get("podAffinityTerm", {})
        for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ]
    p.expect(any(t.get("topologyKey") == "kubernetes.io/hostname"
                 and selects(t.get("labelSelector", {}).get("matchLabels"), meta.get("labels", {}))
                 for t in terms), where, "no pod anti-affinity on kubernetes.io/hostname")

    # Mounts: the config file, the data volume and the pid directory.
    mounts = {m.get("mountPath"): m.get("name") for m in c.get("volumeMounts", [])}
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    claims = {t.get("metadata", {}).get("name"): t for t in spec.get("volumeClaimTemplates", [])}
    p.expect(len(claims) == 1, where, "expected one volumeClaimTemplate")
    for name, claim in claims.items():
        cs = claim.get("spec", {})
        p.expect(cs.get("accessModes") == ["ReadWriteOnce"], where, f"claim {name}: access mode")
        p.expect(cs.get("resources", {}).get("requests", {}).get("storage"), where,
                 f"claim {name}: no storage request")

    conf_dir, conf_file = posixpath.split(CONFIG_ARGS[1])
    conf_volume = volumes.get(mounts.get(conf_dir), {})
    p.expect(conf_volume.get("configMap", {}).get("name") == CONFIG_MAP, where,
             f"{conf_dir} is not a mount of ConfigMap {CONFIG_MAP!r}")
    text = cm.get("data", {}).get(conf_file)
    if not p.expect(isinstance(text, str), "ConfigMap/jetraft-config", f"no key {conf_file!r}"):
        return None
    config = ConfigText(text)
    cwhere = "ConfigMap/jetraft-config jetraft.conf"
    check_config_common(config, cwhere, p)

    store = config.block_value("jetstream", "store_dir")
    p.expect(mounts.get(store) in claims, where,
             f"store_dir {store!r} is not the mount of a volumeClaimTemplate")
    pid_file = config.value("pid_file")
    pid_dir = posixpath.dirname(pid_file or "")
    p.expect("emptyDir" in volumes.get(mounts.get(pid_dir), {}), where,
             f"pid_file directory {pid_dir!r} is not an emptyDir mount (root fs is read-only)")
    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    want = [NAME, "--signal", f"ldm={pid_file}"]
    p.expect(pre_stop == want, where, f"preStop command is {pre_stop}, expected {want}")

    lame_duck = config.seconds("lame_duck_duration") + config.seconds("lame_duck_grace_period")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    p.expect(grace >= lame_duck + 30, where,
             f"terminationGracePeriodSeconds {grace} leaves under 30s beyond lame duck "
             f"({lame_duck:g}s)")
    p.expect(config.value("server_name") == "$SERVER_NAME", cwhere,
             "server_name is not $SERVER_NAME")
    p.expect(config.port("listen") == PORTS["nats"], cwhere, "listen port is not the nats port")
    p.expect(config.int_value("http_port") == PORTS["monitor"], cwhere,
             "http_port is not the monitor port")
    p.expect(config.block_port("cluster", "listen") == PORTS["cluster"], cwhere,
             "cluster listen port is not the cluster port")
    return config


def check_services(headless: dict, client: dict, pod_labels: dict, p: Problems) -> None:
    where = "Service/jetraft"
    spec = headless.get("spec", {})
    p.expect(spec.get("clusterIP") == "None", where, "not headless (clusterIP: None)")
    p.expect(spec.get("publishNotReadyAddresses") is True, where,
             "publishNotReadyAddresses is not true (peers must resolve before they are ready)")
    p.expect(selects(spec.get("selector"), pod_labels), where, "selector does not match the pods")
    ports = {sp.get("name"): sp.get("port") for sp in spec.get("ports", [])}
    p.expect(ports.get("cluster") == PORTS["cluster"], where, "no cluster port 6222")

    where = "Service/jetraft-client"
    spec = client.get("spec", {})
    p.expect(spec.get("clusterIP") != "None", where, "the client Service must not be headless")
    p.expect(selects(spec.get("selector"), pod_labels), where, "selector does not match the pods")
    ports = {sp.get("name"): sp.get("port") for sp in spec.get("ports", [])}
    p.expect(ports.get("nats") == PORTS["nats"], where, "no nats port 4222")


# ---------------------------------------------------------------------------------------------
# The nats-server syntax config files: a small reader for the few settings checked here, not a
# parser (the server's own parser is tested in server/src/config).


class ConfigText:
    def __init__(self, text: str) -> None:
        lines = [ln for ln in text.splitlines() if not re.match(r"\s*(#|//)", ln)]
        self.text = "\n".join(lines)

    def _block(self, name: str) -> str:
        m = re.search(rf"(?m)^\s*{name}\s*[:=]?\s*\{{", self.text)
        if not m:
            return ""
        depth, i = 1, m.end()
        while i < len(self.text) and depth:
            depth += {"{": 1, "}": -1}.get(self.text[i], 0)
            i += 1
        return self.text[m.end():i - 1]

    @staticmethod
    def _value(text: str, key: str) -> str | None:
        m = re.search(rf"(?m)^\s*{key}\s*[:=\s]\s*(.+?)\s*[,;]?\s*$", text)
        return m.group(1).strip("\"'") if m else None

    def value(self, key: str) -> str | None:
        top = re.sub(r"\{[^{}]*\}", "{}", self.text)  # hide one level of blocks
        return self._value(top, key)

    def block_value(self, block: str, key: str) -> str | None:
        return self._value(self._block(block), key)

    def int_value(self, key: str) -> int | None:
        v = self.value(key)
        return int(v) if v and v.isdigit() else None

    @staticmethod
    def _port(v: str | None) -> int | None:
        m = re.search(r":(\d+)$", v or "")
        return int(m.group(1)) if m else None

    def port(self, key: str) -> int | None:
        return self._port(self.value(key))

    def block_port(self, block: str, key: str) -> int | None:
        return self._port(self.block_value(block, key))

    def seconds(self, key: str) -> float:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", self.value(key) or "")
        return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)] if m else 0

    def routes(self) -> list[str]:
        m = re.search(r"routes\s*[:=]?\s*\[(.*?)\]", self._block("cluster"), re.S)
        return re.split(r"[\s,]+", m.group(1).strip()) if m else []


def check_config_common(config: ConfigText, where: str, p: Problems) -> None:
    p.expect(config.block_value("jetstream", "store_dir") == "/data", where,
             "jetstream store_dir is not /data")
    p.expect(config.value("pid_file") == "/var/run/jetraft/jetraft.pid", where,
             "pid_file is not /var/run/jetraft/jetraft.pid")
    for key in ("lame_duck_duration", "lame_duck_grace_period"):
        p.expect(config.seconds(key) > 0, where, f"{key} is not a duration like \"30s\"")
    p.expect(config.block_value("cluster", "name"), where, "no cluster name")


def check_routes(config: ConfigText, hosts: list[str], where: str, p: Problems) -> None:
    want = [f"nats://{h}:{PORTS['cluster']}" for h in hosts]
    got = config.routes()
    p.expect(got == want, where, f"routes are {got}, expected {want}")


# ---------------------------------------------------------------------------------------------
# docker compose and the Dockerfile


def check_compose(p: Problems) -> None:
    path = COMPOSE / "docker-compose.yml"
    docs = load_documents(path, p)
    if not p.expect(len(docs) == 1, rel(path), "expected one document"):
        return
    compose = docs[0]
    names = [f"{NAME}-{i}" for i in range(REPLICAS)]
    services = compose.get("services") or {}
    p.expect(sorted(services) == names, rel(path), f"services are {sorted(services)}, not {names}")
    declared = set(compose.get("volumes") or {})
    p.expect(declared == {f"{n}-data" for n in names}, rel(path),
             f"top-level volumes are {sorted(declared)}")
    host_ports: list[str] = []
    for i, name in enumerate(names):
        s = services.get(name) or {}
        where = f"{rel(path)} {name}"
        p.expect(s.get("command") == CONFIG_ARGS, where, f"command is not {CONFIG_ARGS}")
        env = s.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        p.expect(env.get("SERVER_NAME") == name, where, "SERVER_NAME is not the service name")
        p.expect(s.get("hostname") == name, where, "hostname is not the service name")
        vols = s.get("volumes") or []
        p.expect(f"{name}-data:/data" in vols, where, f"does not mount volume {name}-data at /data")
        p.expect(f"./jetraft.conf:{CONFIG_ARGS[1]}:ro" in vols, where,
                 "does not mount ./jetraft.conf read-only")
        ports = s.get("ports") or []
        want = [f"{PORTS['nats'] + i}:{PORTS['nats']}", f"{PORTS['monitor'] + i}:{PORTS['monitor']}"]
        p.expect(ports == want, where, f"ports are {ports}, expected {want}")
        host_ports += [x.split(":")[0] for x in ports]
        build = s.get("build") or {}
        dockerfile = (COMPOSE / build.get("context", ".") / build.get("dockerfile", "Dockerfile"))
        p.expect(dockerfile.resolve() == (DOCKER / "Dockerfile").resolve(), where,
                 "build does not use deploy/docker/Dockerfile")
    p.expect(len(host_ports) == len(set(host_ports)), rel(path), "a host port is published twice")

    conf = COMPOSE / "jetraft.conf"
    if p.expect(conf.is_file(), rel(conf), "missing"):
        config = ConfigText(conf.read_text())
        check_config_common(config, rel(conf), p)
        p.expect(config.value("server_name") == "$SERVER_NAME", rel(conf),
                 "server_name is not $SERVER_NAME")
        check_routes(config, names, rel(conf), p)


def check_docker(p: Problems) -> None:
    path = DOCKER / "Dockerfile"
    text = path.read_text()
    where = rel(path)
    stages = re.findall(r"(?im)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text)
    p.expect(len(stages) >= 2, where, "not a multi-stage build")
    if stages:
        p.expect(re.search(r"-slim$", stages[-1][0]), where, "runtime stage is not a -slim image")
    final = text[text.rfind("\nFROM "):] if "\nFROM " in text else text
    user = re.findall(r"(?m)^USER\s+(\S+)", final)
    p.expect(user and user[-1].split(":")[0] not in ("root", "0"), where, "runs as root")
    p.expect(re.search(r'(?m)^VOLUME\s+\[?"?/data', final), where, "no /data volume")
    exposed = set(" ".join(re.findall(r"(?m)^EXPOSE\s+(.+)$", final)).split())
    p.expect({"4222", "6222", "8222"} <= exposed, where, f"EXPOSE lists {sorted(exposed)}")
    p.expect(re.search(r'(?m)^ENTRYPOINT\s+\["jetraft"\]', final), where,
             'ENTRYPOINT is not ["jetraft"]')
    p.expect("--mount=type=cache" in text, where, "no BuildKit cache mounts")
    p.expect("--bin jetraft" in text and "--release" in text, where, "no release build of jetraft")
    for src, dst in re.findall(r"(?m)^COPY\s+(?!--from)(\S+)\s+(\S+)", final):
        p.expect((ROOT / src).exists(), where, f"COPY source {src} does not exist")
    conf = DOCKER / "jetraft.conf"
    if p.expect(conf.is_file(), rel(conf), "missing"):
        config = ConfigText(conf.read_text())
        p.expect(config.block_value("jetstream", "store_dir") == "/data", rel(conf),
                 "jetstream store_dir is not /data")

    ignore = ROOT / ".dockerignore"
    if p.expect(ignore.is_file(), ".dockerignore", "missing"):
        entries = {ln.strip().rstrip("/") for ln in ignore.read_text().splitlines()}
        for must in (".git", "target", "data", ".venv"):
            p.expect(must in entries, ".dockerignore", f"does not exclude {must}")


def main() -> int:
    p = Problems()
    docs: list[tuple[Path, dict]] = []
    for f in manifest_files():
        docs += [(f, d) for d in load_documents(f, p)]
    p.expect(docs, "deploy/k8s", "no manifests found")
    check_schemas(docs, p)
    check_kustomization(p)
    check_k8s([d for _, d in docs], p)
    check_compose(p)
    check_docker(p)
    if p.items:
        for item in p.items:
            print(f"FAIL {item}")
        print(f"validate-manifests: {len(p.items)} of {p.checks} checks failed")
        return 1
    print(f"validate-manifests: {len(docs)} Kubernetes documents valid against "
          f"{', '.join(KUBERNETES_VERSIONS)} (strict); {p.checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
