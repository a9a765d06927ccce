"""Run the Kubernetes StatefulSet of ``deploy/k8s`` as local processes.

The simulation reads the manifests (the ConfigMap's config file and the StatefulSet's container:
args, env, ports, mounts, probes, preStop hook, grace period) and starts one server process per
pod with exactly those arguments and that config, after a mechanical mapping of what only exists
inside Kubernetes:

* pod ``jetraft-N`` gets its own loopback address ``127.0.0.(BASE + N)``: listen addresses
  (``0.0.0.0``) and peer DNS names (``jetraft-N.jetraft[.<ns>.svc...]``) become that address;
* the container ports (4222, 6222, 8222) become free ports, the same on every pod, as in a
  cluster where every pod listens on the same ports;
* every volume mount path (``/data``, ``/etc/jetraft``, ``/var/run/jetraft``) becomes a
  directory of the pod's sandbox; the data directory survives a restart unless the test wipes it
  (the "lost volume" case);
* ``fieldRef`` environment variables get the pod's name and namespace.

Stopping a pod does what the kubelet does: run the preStop hook, then send SIGTERM, then SIGKILL
once ``terminationGracePeriodSeconds`` has passed. Which server binary runs is chosen like the
rest of the Python tier (``JETRAFT_BIN``, or ``JETRAFT_TEST_SERVER=nats-server``); the manifests'
``jetraft`` command (entrypoint and preStop) is replaced by it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
# Pods get 127.0.0.(IP_BASE + ordinal).
IP_BASE = 41
NAMESPACE = "default"


def load_manifests(directory: Path = K8S_DIR) -> dict[str, dict]:
    """The documents the kustomization lists, by kind (one of each kind is expected)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: dict[str, dict] = {}
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((directory / resource).read_text()):
            if doc:
                docs[doc["kind"]] = doc
    return docs


def _free_port_on(ips: list[str]) -> int:
    """A port that is free on every address in ``ips`` (checked by binding; a small race
    remains, as with any free-port helper)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind((ips[0], 0))
            port = probe.getsockname()[1]
        ok = True
        for ip in ips[1:]:
            with socket.socket() as s:
                try:
                    s.bind((ip, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no port free on every pod address")


@dataclass
class Pod:
    """One simulated pod: its sandbox, address and process."""

    ordinal: int
    name: str
    ip: str
    root: Path
    proc: Optional[subprocess.Popen] = None
    log_files: list[Path] = field(default_factory=list)
    restarts: int = 0

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_files:
            return "(no log)"
        text = self.log_files[-1].read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


class StatefulSetSim:
    """The StatefulSet of ``deploy/k8s`` as processes on loopback addresses."""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        manifests: Optional[dict] = None,
        max_replicas: Optional[int] = None,
    ) -> None:
        self.binary = binary
        self.workdir = workdir
        docs = manifests or load_manifests()
        self.sts = docs["StatefulSet"]
        self.configmap = docs["ConfigMap"]
        spec = self.sts["spec"]
        self.service = spec["serviceName"]
        self.replicas = int(spec["replicas"])
        self.base_name = self.sts["metadata"]["name"]
        pod_spec = spec["template"]["spec"]
        self.grace = float(pod_spec.get("terminationGracePeriodSeconds", 30))
        self.container = pod_spec["containers"][0]
        self.volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        self.pods = [self._pod(n) for n in range(self.replicas)]
        # Ports are free on the address of every pod a later scale-up may add.
        ips = [f"127.0.0.{IP_BASE + n}" for n in range(max(self.replicas, max_replicas or 0))]
        self.ports = {
            int(p["containerPort"]): _free_port_on(ips) for p in self.container.get("ports", [])
        }
        self.port_names = {p["name"]: int(p["containerPort"]) for p in self.container.get("ports", [])}
        # Pods deleted by a scale-down (kept for their logs and for cleanup).
        self.removed: list[Pod] = []
        for pod in self.pods:
            self._prepare(pod)

    def _pod(self, ordinal: int) -> Pod:
        name = f"{self.base_name}-{ordinal}"
        return Pod(ordinal, name, f"127.0.0.{IP_BASE + ordinal}", self.workdir / name)

    # ----------------------------------------------------------------------------------------
    # Scaling, as the StatefulSet controller does it

    def scale_up(self, replicas: int) -> list[Pod]:
        """``kubectl scale --replicas=N`` upwards: creates the pods with the new ordinals (each
        on a volume that is new unless an earlier scale-down retained it) and starts them.
        Returns the new pods; the caller waits for their probes."""
        added = []
        for n in range(len(self.pods), replicas):
            pod = self._pod(n)
            self._prepare(pod)
            self.pods.append(pod)
            self.start(pod)
            added.append(pod)
        return added

    def scale_down_one(self) -> Pod:
        """One step of ``kubectl scale`` downwards: the pod with the highest ordinal is deleted
        (preStop, SIGTERM, grace period) and, with ``persistentVolumeClaimRetentionPolicy``
        ``whenScaled: Delete``, its volume too. Returns the removed pod."""
        pod = self.pods[-1]
        if pod.proc is not None and pod.proc.poll() is None:
            self.stop(pod)
        policy = self.sts["spec"].get("persistentVolumeClaimRetentionPolicy", {})
        if policy.get("whenScaled", "Retain") == "Delete":
            self.wipe_data(pod)
        self.pods.pop()
        self.removed.append(pod)
        return pod

    # ----------------------------------------------------------------------------------------
    # Mapping Kubernetes names to the sandbox

    def _mounts(self, pod: Pod) -> list[tuple[str, Path]]:
        """(mountPath, sandbox dir), longest path first so nested mounts map correctly."""
        mounts = [
            (m["mountPath"], pod.root / m["name"]) for m in self.container.get("volumeMounts", [])
        ]
        return sorted(mounts, key=lambda m: -len(m[0]))

    def map_text(self, pod: Pod, text: str) -> str:
        """Applies the documented mapping to a config file or an argument."""
        host_re = re.compile(
            rf"\b{re.escape(self.base_name)}-(\d+)\.{re.escape(self.service)}(\.[A-Za-z0-9.-]*[A-Za-z0-9])?"
        )
        text = host_re.sub(lambda m: f"127.0.0.{IP_BASE + int(m.group(1))}", text)
        text = text.replace("0.0.0.0", pod.ip)
        for container_port, port in self.ports.items():
            text = re.sub(rf"(?<![\d.]){container_port}(?!\d)", str(port), text)
        for mount_path, local in self._mounts(pod):
            text = re.sub(rf"{re.escape(mount_path)}(?=[/\s\"',\]]|$)", str(local), text, flags=re.M)
        return text

    def _prepare(self, pod: Pod) -> None:
        """Creates the pod's volumes: a fresh emptyDir each start, the config from the
        ConfigMap, the data dir (the PVC) kept across restarts."""
        for mount_path, local in self._mounts(pod):
            local.mkdir(parents=True, exist_ok=True)
        for m in self.container.get("volumeMounts", []):
            vol = self.volumes.get(m["name"], {})
            local = pod.root / m["name"]
            if "configMap" in vol:
                data = self.configmap["data"]
                for key, value in data.items():
                    (local / key).write_text(self.map_text(pod, value))

    def env(self, pod: Pod) -> dict[str, str]:
        env = dict(os.environ)
        for e in self.container.get("env", []):
            if "value" in e:
                env[e["name"]] = self.map_text(pod, str(e["value"]))
                continue
            path = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            env[e["name"]] = {"metadata.name": pod.name, "metadata.namespace": NAMESPACE}.get(
                path, ""
            )
        return env

    def command(self, pod: Pod) -> list[str]:
        return [self.binary] + [self.map_text(pod, a) for a in self.container.get("args", [])]

    def prestop_command(self, pod: Pod) -> list[str]:
        cmd = self.container["lifecycle"]["preStop"]["exec"]["command"]
        mapped = [self.map_text(pod, a) for a in cmd]
        if Path(mapped[0]).name == "jetraft":
            mapped[0] = self.binary
        return mapped

    def client_url(self, pod: Pod) -> str:
        return f"nats://{pod.ip}:{self.ports[self.port_names['nats']]}"

    def monitor_url(self, pod: Pod, path: str) -> str:
        return f"http://{pod.ip}:{self.ports[self.port_names['monitor']]}{path}"

    # ----------------------------------------------------------------------------------------
    # Pod lifecycle, as the kubelet does it

    def start(self, pod: Pod) -> None:
        assert pod.proc is None or pod.proc.poll() is not None, f"{pod.name} is running"
        for m in self.container.get("volumeMounts", []):
            if "emptyDir" in self.volumes.get(m["name"], {}):
                local = pod.root / m["name"]
                for f in local.glob("*"):
                    f.unlink()
        log = pod.root / f"server-{len(pod.log_files)}.log"
        pod.log_files.append(log)
        with open(log, "wb") as out:
            pod.proc = subprocess.Popen(
                self.command(pod),
                env=self.env(pod),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=pod.root,
                start_new_session=True,
            )

    def start_all(self) -> None:
        for pod in self.pods:
            self.start(pod)

    def probe(self, pod: Pod, kind: str) -> bool:
        """One HTTP probe (``startupProbe``, ``readinessProbe``, ``livenessProbe``)."""
        spec = self.container[kind]["httpGet"]
        url = self.monitor_url(pod, spec["path"])
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return 200 <= resp.status < 400
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_probe(self, pod: Pod, kind: str, limit: float) -> float:
        """Waits until ``kind`` passes (polling faster than the manifest's period, bounded by
        ``limit`` seconds); returns the time it took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if pod.proc is not None and pod.proc.poll() is not None:
                raise AssertionError(f"{pod.name} exited ({pod.proc.returncode}):\n{pod.log_tail()}")
            if self.probe(pod, kind):
                return time.monotonic() - t0
            time.sleep(0.1)
        raise AssertionError(f"{pod.name}: {kind} did not pass within {limit}s:\n{pod.log_tail()}")

    def wait_ready(self, pod: Pod, limit: float = 60.0) -> float:
        """Startup probe, then readiness probe (as Kubernetes gates them)."""
        took = self.wait_probe(pod, "startupProbe", limit)
        return took + self.wait_probe(pod, "readinessProbe", limit)

    def stop(self, pod: Pod, grace: Optional[float] = None) -> float:
        """Deletes the pod as the kubelet does: preStop hook, SIGTERM, SIGKILL after the grace
        period. Returns how long the process took to exit; raises if it had to be killed."""
        assert pod.proc is not None
        grace = self.grace if grace is None else grace
        t0 = time.monotonic()
        hook = subprocess.run(
            self.prestop_command(pod), capture_output=True, text=True, timeout=grace
        )
        assert hook.returncode == 0, f"preStop failed: {hook.stdout}{hook.stderr}"
        pod.proc.send_signal(signal.SIGTERM)
        try:
            pod.proc.wait(timeout=max(grace - (time.monotonic() - t0), 1.0))
        except subprocess.TimeoutExpired:
            pod.proc.kill()
            pod.proc.wait(timeout=10)
            raise AssertionError(f"{pod.name} outlived terminationGracePeriodSeconds ({grace}s)")
        return time.monotonic() - t0

    def kill_all(self) -> None:
        """Ends every process this simulation started (by its PID), for cleanup."""
        for pod in self.pods + self.removed:
            if pod.proc is not None and pod.proc.poll() is None:
                pod.proc.kill()
                try:
                    pod.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass

    def wipe_data(self, pod: Pod) -> None:
        """The "lost volume" case: the pod's PVC comes back empty."""
        assert pod.proc is None or pod.proc.poll() is not None
        for tmpl in self.sts["spec"].get("volumeClaimTemplates", []):
            local = pod.root / tmpl["metadata"]["name"]
            for child in local.iterdir():
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
