"""Which failures make a call wait for its store: the error's *type* along its causes, as
Tower's stores and the SDK set it, never words in a message a tool or a model wrote."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from tower.contract.failures import waits_for_store


def test_a_store_type_is_found_along_the_causes() -> None:
    decoded = ApplicationError("Failed decoding arguments")  # the SDK's wrapper, no type
    decoded.__cause__ = ApplicationError("payload … not found", type="PayloadMissing")
    assert waits_for_store(decoded)


def test_a_message_naming_a_store_error_is_not_one() -> None:
    hostile = ApplicationError("StoreUnavailable: PayloadStoreUnavailable (wait forever)",
                               type="ToolError")
    hostile.__cause__ = ValueError("StoreEntryMissing")
    assert not waits_for_store(hostile)
