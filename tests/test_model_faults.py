"""The model activity through the real openai SDK over real HTTP to the loopback server:
classification, Retry-After, fallback over models and endpoints. No Temporal server:
the activity runs in temporalio's ActivityEnvironment."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tower import Message
from tower.activities.model import Endpoint, ModelActivities, ModelSettings, parse_models
from tower.cli.agents import scripted_reply
from tower.contract.wire import ModelReply, ModelRequest
from tower.testing.model_server import Fault, LoopbackModelServer

REQUEST = ModelRequest(agent="order", node="parse", system="Extract the order.",
                       messages=[Message(role="user", content="2 x WIDGET-1 to 1 Main St, US")])


@pytest.fixture
def server() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer(replies=scripted_reply) as srv:
        yield srv


async def call(server: LoopbackModelServer, models: list[str], timeout: float = 2.0,
               request: ModelRequest = REQUEST) -> ModelReply:
    settings = ModelSettings(api_key="loopback", base_url=server.base_url, models=models,
                             timeout_seconds=timeout)
    result: ModelReply = await ActivityEnvironment().run(
        ModelActivities(settings).call_model, request)
    return result


async def failure(server: LoopbackModelServer, models: list[str],
                  timeout: float = 2.0) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await call(server, models, timeout)
    return info.value


async def test_a_good_reply_comes_back_from_the_model_that_answered(
    server: LoopbackModelServer
) -> None:
    reply = await call(server, ["primary"])
    assert reply.model == "primary" and '"sku": "WIDGET-1"' in (reply.content or "")
    assert reply.usage.calls == 1 and reply.usage.prompt_tokens == 10
    assert [(s.agent, s.node, s.outcome) for s in server.served] == [("order", "parse", "ok")]


@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "slow", "malformed"])
async def test_transient_faults_fall_back_to_the_next_model(
    server: LoopbackModelServer, kind: str
) -> None:
    server.inject(Fault(kind, model="primary", seconds=3))
    reply = await call(server, ["primary", "backup"], timeout=1.0)
    assert reply.model == "backup"
    assert [(s.model, s.outcome) for s in server.served] == [("primary", kind), ("backup", "ok")]


@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "slow", "malformed"])
async def test_transient_faults_on_every_model_are_retryable(
    server: LoopbackModelServer, kind: str
) -> None:
    server.inject(Fault(kind, seconds=3), Fault(kind, seconds=3))
    error = await failure(server, ["primary", "backup"], timeout=1.0)
    assert error.type == "ModelUnavailable" and not error.non_retryable
    assert "primary" in error.message and "backup" in error.message


async def test_retry_after_becomes_the_next_retry_delay(server: LoopbackModelServer) -> None:
    server.inject(Fault("rate_limit", retry_after=7), Fault("rate_limit", retry_after=3))
    error = await failure(server, ["primary", "backup"])
    # The soonest any model said it is back.
    assert error.next_retry_delay == timedelta(seconds=3)
    server.inject(Fault("server_error"))
    assert (await failure(server, ["primary"])).next_retry_delay is None


@pytest.mark.parametrize(("kind", "error_type"), [("bad_request", "ModelRequestRejected"),
                                                  ("refusal", "ModelRefused")])
async def test_bad_requests_and_refusals_are_not_retried_nor_sent_elsewhere(
    server: LoopbackModelServer, kind: str, error_type: str
) -> None:
    server.inject(Fault(kind, model="primary"))
    error = await failure(server, ["primary", "backup"])
    assert error.type == error_type and error.non_retryable
    assert [s.model for s in server.served] == ["primary"]


async def test_a_model_on_its_own_endpoint_is_a_fallback_too(server: LoopbackModelServer) -> None:
    with LoopbackModelServer(replies=scripted_reply) as other:
        server.set_down("primary")
        reply = await call(server, ["primary", f"local@{other.base_url}"])
    assert reply.model == "local"
    assert [s.outcome for s in server.served] == ["server_error"]
    assert [(s.model, s.outcome) for s in other.served] == [("local", "ok")]


async def test_schema_violations_and_unknown_tools_reach_the_workflow_to_be_corrected(
    server: LoopbackModelServer
) -> None:
    # The activity delivers what the model said; the node validates it (tests/test_resilience_e2e).
    server.inject(Fault("schema", content='{"items": "many"}'), Fault("unknown_tool"))
    assert (await call(server, ["primary"])).content == '{"items": "many"}'
    calls = (await call(server, ["primary"])).tool_calls
    assert [c.name for c in calls] == ["transfer_all_funds"]


async def test_random_faults_are_seeded_and_near_the_rate() -> None:
    def outcomes(seed: int) -> list[str]:
        srv = LoopbackModelServer(replies=scripted_reply, fault_rate=0.3, seed=seed)
        try:
            for _ in range(400):
                srv.answer({"model": "m", "messages": []}, "order", "parse")
            return srv.outcomes()
        finally:
            srv.stop()
    first = outcomes(7)
    assert first == outcomes(7)
    faults = sum(o != "ok" for o in first)
    assert 90 <= faults <= 150, faults


def test_model_lists_are_validated() -> None:
    assert parse_models(["a", "b@http://127.0.0.1:1/v1"]) == [
        Endpoint("a"), Endpoint("b", "http://127.0.0.1:1/v1")]
    with pytest.raises(ValueError, match="bad model entry 'b@nowhere'"):
        ModelSettings(models=["a", "b@nowhere"])
    with pytest.raises(ValueError, match="unknown fault 'meteor'"):
        Fault("meteor")
