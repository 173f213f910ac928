"""The production-shaped stack: docker-compose.yml against the Compose Specification's schema,
and what the stack must contain; the search-attribute setup on a real server."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from starter.devserver import temporal_binary
from starter.server_setup import SearchAttributeClash, register_search_attributes
from starter.telemetry import exporter_names, make_exporter
from tower.contract import search

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
    assert {"postgresql", "temporal", "temporal-setup", "temporal-ui", "worker",
            "otel-collector", "jaeger"} <= set(services)
    assert services["temporal"]["environment"]["DB"] == "postgres12"
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"
    worker = services["worker"]
    # `--scale worker=N` needs no fixed name and no fixed host port.
    assert worker["build"] == "." and "container_name" not in worker and "ports" not in worker
    assert worker["command"] == ["python", "worker.py"]
    assert worker["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert worker["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert worker["depends_on"]["temporal-setup"]["condition"] == \
        "service_completed_successfully"
    assert services["temporal-setup"]["command"] == ["python", "-m", "starter.server_setup"]
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["python", "worker.py"]' in dockerfile and "pip install ." in dockerfile
    # The worker drains on SIGTERM within its grace, well before docker's SIGKILL.
    assert "STOPSIGNAL SIGTERM" in dockerfile
    grace = re.search(r"TOWER_SHUTDOWN_GRACE=(\d+)", dockerfile)
    assert grace and int(grace.group(1)) < int(worker["stop_grace_period"].rstrip("s"))


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


async def test_server_setup_registers_the_search_attributes_once() -> None:
    """On a server started without them, as a production cluster is."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
        dev_server_log_level="error", dev_server_extra_args=["--namespace", "other"])
    try:
        client = env.client
        assert await register_search_attributes(client) == sorted(k.name for k in search.ALL)
        assert await register_search_attributes(client) == []  # idempotent
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default"))
        assert {k.name for k in search.ALL} <= set(listed.custom_attributes)
        # A same-named attribute of another type is refused, not replaced.
        await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
            namespace="other", search_attributes={
                "AgentStep": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}))
        with pytest.raises(SearchAttributeClash, match="AgentStep is INDEXED_VALUE_TYPE_KEYWORD"):
            await register_search_attributes(client, "other")
    finally:
        await env.shutdown()
