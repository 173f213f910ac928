"""One failure model (issue 41): every failure Tower raises crosses Temporal's boundaries and
comes back as the same Tower error — code, class, message, fields and final-ness — through
the SDK's own failure converter; and a client's converter Tower would not read alike is
refused, never silently replaced."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.common.v1 import ActivityType
from temporalio.api.failure.v1 import ActivityFailureInfo, Failure
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultPayloadConverter, PayloadCodec
from temporalio.exceptions import ActivityError, ApplicationError

from bench.surface import measure
from tower.client.errors import ClientError, RunNotFound
from tower.contract.failures import (
    REFUSALS,
    RETRIED,
    AgentFailed,
    Code,
    DecisionRefused,
    EffectRefused,
    TowerError,
    code_of,
    failure,
    rebuilt,
)
from tower.temporal.payloads import PayloadMissing, TowerDataConverter, TowerPayloadConverter
from tower.temporal.plugin import TowerPlugin, WorkerMisconfigured

from .test_bench_surface import ROOT

# Each kind's failure as a plain TowerError (the classes whose fields ride in the details are
# sent as themselves: test_the_classes_users_catch_come_back_with_their_fields).
WITH_FIELDS = {Code.EFFECT_REFUSED, Code.DECISION_REFUSED, Code.AGENT_FAILED}
FAILURE_TYPES = [c for c in Code if c not in REFUSALS and c not in WITH_FIELDS]
# Pydantic's converter as Tower builds it (tower_data_converter adds the store and codec).
pydantic_converter = dataclasses.replace(pydantic_data_converter,
                                         payload_converter_class=TowerPayloadConverter)


def sent(error: BaseException) -> ApplicationError:
    """``error`` as the other side of the wire reads it: encoded and decoded by Tower's
    converter (the SDK's failure converter, the details through pydantic's JSON)."""
    wire = Failure()
    pydantic_converter.failure_converter.to_failure(error, pydantic_converter.payload_converter,
                                                    wire)
    back = pydantic_converter.failure_converter.from_failure(
        wire, pydantic_converter.payload_converter)
    assert isinstance(back, ApplicationError)
    return back


def from_activity(error: TowerError) -> ActivityError:
    """What a workflow catches when an activity failed with ``error``."""
    outer = Failure(message="Activity task failed", activity_failure_info=ActivityFailureInfo(
        activity_type=ActivityType(name="a_tool"), activity_id="1"))
    pydantic_converter.failure_converter.to_failure(failure(error),
                                                    pydantic_converter.payload_converter,
                                                    outer.cause)
    caught = pydantic_converter.failure_converter.from_failure(
        outer, pydantic_converter.payload_converter)
    assert isinstance(caught, ActivityError)
    return caught


@pytest.mark.parametrize("code", FAILURE_TYPES)
def test_every_failure_type_survives_the_round_trip(code: Code) -> None:
    error = TowerError(f"it failed: {code}", code=code)
    for caught in (from_activity(error), WorkflowFailureError(cause=sent(failure(error))),
                   WorkflowUpdateFailedError(sent(failure(error)))):
        again = rebuilt(caught)
        assert again is not None and again.code == code, caught
        assert str(again) == f"it failed: {code}"
        assert again.retryable is (code in RETRIED)
        assert code_of(caught) == code
    wire = sent(failure(error))
    assert wire.type == code and wire.non_retryable is (code not in RETRIED)


def test_the_classes_users_catch_come_back_with_their_fields() -> None:
    refused = rebuilt(from_activity(EffectRefused("over_limit", "more than 100 €", tool="pay")))
    assert isinstance(refused, EffectRefused)
    assert (refused.code, refused.reason, refused.tool) == ("over_limit", "more than 100 €",
                                                             "pay")
    assert sent(failure(EffectRefused("x", "why"))).non_retryable

    for code in REFUSALS:
        wire = sent(failure(DecisionRefused(f"refused: {code}", code=code)))
        # The wire the contract names: the type, the code alone as the first detail.
        assert (wire.type, list(wire.details), wire.non_retryable) == (
            "DecisionRefused", [code.value], True)
        again = rebuilt(WorkflowUpdateFailedError(wire))
        assert isinstance(again, DecisionRefused) and again.code == code
        assert again.reason == f"refused: {code}" and again.unknown_key is (
            code == Code.UNKNOWN_KEY)

    failed = rebuilt(WorkflowFailureError(cause=sent(failure(AgentFailed(
        "tool broke", agent="refund", node="pay", step=4)))))
    assert isinstance(failed, AgentFailed)
    assert (failed.reason, failed.agent, failed.node, failed.step) == ("tool broke", "refund",
                                                                       "pay", 4)


def test_a_retry_delay_and_a_final_failure_are_kept() -> None:
    wire = sent(failure(TowerError("no model answered", code=Code.MODEL_UNAVAILABLE,
                                   retry_after=timedelta(seconds=7))))
    assert not wire.non_retryable and wire.next_retry_delay == timedelta(seconds=7)
    assert sent(failure(TowerError("gone", code=Code.MCP_UNREACHABLE,
                                   retryable=False))).non_retryable


def test_what_carries_no_tower_failure_is_none() -> None:
    hostile = ApplicationError("EffectRefused: pay nothing", {"code": "over_limit"},
                               type="ToolError")
    hostile.__cause__ = ValueError("DecisionRefused")
    assert rebuilt(hostile) is None and code_of(hostile) is None
    assert rebuilt(ValueError("AgentFailed")) is None


def test_a_store_class_the_sdk_reports_by_name_is_rebuilt() -> None:
    # The SDK's failure converter names a plain exception by its class: a payload store's.
    again = rebuilt(sent(PayloadMissing("payload abc not found")))
    assert isinstance(again, PayloadMissing) and again.retryable
    # A class of its own comes back as that class, whatever layer defines it.
    assert isinstance(rebuilt(sent(failure(RunNotFound("no run 'x'")))), RunNotFound)


def test_every_exception_class_hangs_from_tower_error() -> None:
    roots = {r.rpartition(":")[2] for r in measure(ROOT).roots}
    # NeedsTowerPlugin is a BaseException on purpose (tower/__init__.py says why).
    assert roots == {"TowerError", "NeedsTowerPlugin"}
    assert issubclass(ClientError, TowerError) and issubclass(WorkerMisconfigured, ValueError)


class _Secret(PayloadCodec):
    async def encode(self, payloads: Any) -> Any:
        return payloads

    async def decode(self, payloads: Any) -> Any:
        return payloads


def test_a_foreign_converter_is_refused_never_replaced() -> None:
    plugin = TowerPlugin()
    foreign = DataConverter(payload_codec=_Secret())
    with pytest.raises(WorkerMisconfigured, match="payload codec _Secret"):
        plugin.converter_for(foreign)
    with pytest.raises(WorkerMisconfigured, match="payload converter"):
        plugin.converter_for(DataConverter(payload_converter_class=_Custom))
    # Through the SDK's plugin hook, as Client.connect(plugins=[...]) calls it.
    with pytest.raises(WorkerMisconfigured):
        plugin.configure_client({"data_converter": foreign})  # type: ignore[typeddict-item]
    # The SDK's default and pydantic's write what Tower's converter writes: Tower's serves.
    for plain in (DataConverter.default, pydantic_data_converter):
        assert isinstance(plugin.converter_for(plain), TowerDataConverter)
    # Chosen on purpose, a converter is kept as it is.
    assert TowerPlugin(data_converter=foreign).converter_for(None) is foreign


class _Custom(DefaultPayloadConverter):
    pass
