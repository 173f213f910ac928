"""Tower's one failure model: a code for every way Tower fails, the root exception, the
engine's own errors, and the registry that carries a failure across Temporal's boundaries.

``failure(exc)`` makes the ``ApplicationError`` that crosses (its type is the code, the
fields ride in its details); ``rebuilt(exc)`` makes the Tower error again on the other side,
whatever wraps it. This is the only module that spells a failure type or reads details
(``python -m bench surface`` counts the others: 0). Nothing here imports temporalio at
module level (tests/unit/test_layers.py).
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Self

if TYPE_CHECKING:
    from pydantic import ValidationError
    from temporalio.exceptions import ApplicationError


class Code(StrEnum):
    """What went wrong, as a word every surface reads (never the message's words)."""

    # A refused decision (docs/approvals.md): ``DecisionRefused.code``, the ``decide``
    # update's error (its ``details[0]``), the audit trail of refused signals.
    ALREADY_DECIDED = "already_decided"  # the gate was decided; or its id names another one
    EXPIRED = "expired"  # the request expired before the decision came
    NOT_PENDING = "not_pending"  # no request of that gate waits (not reached, unknown gate)
    WRONG_RUN = "wrong_run"  # made for another tenant, workflow or run id (a reset, a new run)
    WRONG_REQUEST = "wrong_request"  # made for another request of the run (another step)
    WRONG_PROPOSAL = "wrong_proposal"  # made for another proposal than the pending one
    NOT_AUTHORIZED = "not_authorized"  # the signer may not decide as that person or role
    BAD_SIGNATURE = "bad_signature"  # the signature, algorithm or token type does not verify
    UNKNOWN_KEY = "unknown_key"  # signed under a key id the run's roster does not name
    TOKEN_EXPIRED = "token_expired"  # the signed decision itself expired (or is not valid yet)
    POLICY = "policy"  # the tenant's policy refuses it (unsigned, lives too long)
    BAD_EDIT = "bad_edit"  # an edit the gate does not allow
    MALFORMED = "malformed"  # not a decision: wrong shape, wrong JSON types, no token
    DUPLICATE = "duplicate"  # a repeat of an accepted decision (a signal): nothing changed
    OVERLOADED = "overloaded"  # a flood: not judged (send it again)
    NOT_JUDGED = "not_judged"  # the request closed, or the roster was not re-read, first
    UNKNOWN_SIGNAL = "unknown_signal"  # a signal the run does not take

    # Failure types: the value is the failure's type where Temporal shows it (the Web UI,
    # the `temporal` CLI, a retry policy's non-retryable types).
    # A run and its inputs.
    AGENT_FAILED = "AgentFailed"  # a run ended FAILED (its workflow execution fails)
    DECISION_REFUSED = "DecisionRefused"  # the ``decide`` update refused (code in details)
    INPUT_REFUSED = "InputRefused"  # a start or an input the run does not take
    EVENT_REFUSED = "EventRefused"  # an event the run does not take now
    TRUST_MISSING = "TrustMissing"  # the tenant's roster or policy is missing or invalid
    NODE_FAILED = "NodeFailed"  # a node could not do its work
    INVALID_GRAPH = "InvalidGraph"  # a graph built wrong
    ILLEGAL_TRANSITION = "IllegalTransition"  # a move not declared, or its guard failed
    BAD_UPDATE = "BadUpdate"  # a state update that does not fit the state
    BAD_POLICY = "BadPolicy"  # a tenant policy invalid, or loosened without leave
    UNOPENABLE_PAYLOAD = "UnopenablePayload"  # an input the worker cannot open
    # Tools and effects.
    EFFECT_REFUSED = "EffectRefused"  # a tool refused: an invariant does not hold
    BAD_TOOL_ARGUMENTS = "BadToolArguments"  # a tool's arguments do not fit it
    EFFECT_CONFLICT = "EffectConflict"  # a key already used with other arguments
    NOT_AN_EFFECT = "NotAnEffect"  # asked to reconcile a tool not made with tower.effects
    FENCED_OFF = "FencedOff"  # a later attempt owns the effect's key
    TOOL_BUSY = "ToolBusy"  # the effect's lock was not had in this attempt (retried)
    ACTIVITY_REFUSED = "ActivityRefused"  # an activity its scheduler may not call
    ATTEMPT_TIMED_OUT = "AttemptTimedOut"  # an attempt outlived its deadline (retried)
    MCP_OUTCOME_UNKNOWN = "McpOutcomeUnknown"  # a non-idempotent MCP call may have acted
    MCP_UNREACHABLE = "McpUnreachable"  # the MCP server did not answer; nothing was sent
    MCP_TRANSPORT_ERROR = "McpTransportError"  # an MCP call broke (retried)
    # Models.
    SCRIPT_FAILED = "ScriptFailed"  # a scripted model's script raised (a bug in the project)
    NO_MESSAGE_STORE = "NoMessageStore"  # a call needs a message store the worker lacks
    MODEL_REQUEST_REJECTED = "ModelRequestRejected"  # no model can serve this request
    MODEL_UNAVAILABLE = "ModelUnavailable"  # no model answered (retried)
    MODEL_REFUSED = "ModelRefused"  # the model refused to answer
    EMPTY_REPLY = "EmptyReply"  # a model answered nothing (the next model is tried)
    # Stores (an attempt fails; the run waits for the store: tower/temporal/_task_time.py).
    STORE_ENTRY_MISSING = "StoreEntryMissing"
    STORE_UNAVAILABLE = "StoreUnavailable"
    PAYLOAD_MISSING = "PayloadMissing"
    PAYLOAD_STORE_UNAVAILABLE = "PayloadStoreUnavailable"
    # Notices.
    BAD_NOTIFY_SETTINGS = "BadNotifySettings"
    WEBHOOK_REFUSED = "WebhookRefused"
    WEBHOOK_UNREACHABLE = "WebhookUnreachable"  # retried
    # Settings, set-up and tools around runs (raised where they are read, never carried).
    BAD_SETTINGS = "BadSettings"  # a setting, file or configuration that does not hold
    MISSING_EXTRA = "MissingExtra"  # an optional dependency not installed
    CLIENT_ERROR = "ClientError"  # what a client call refuses
    RUN_NOT_FOUND = "RunNotFound"
    RUN_CLOSED = "RunClosed"
    REPLY_MISSING = "ReplyMissing"
    NOT_GENUINE = "NotGenuine"  # a request this deployment did not attest
    NOT_CONFIRMED = "NotConfirmed"
    SERVER_UNREACHABLE = "ServerUnreachable"
    UNKNOWN_TENANT = "UnknownTenant"  # a tenant whose namespace the server does not have
    BAD_HISTORY = "BadHistory"  # a history that cannot be read or replayed
    BAD_EVAL = "BadEval"  # an eval set, recording or baseline that cannot be used
    BAD_INPUT = "BadInput"  # a form, an amount or a request a person typed wrong
    AHEAD_OF_ITS_TASK = "AheadOfItsTask"  # a query's activation ahead of its task
    NO_EFFECT = "NoEffect"  # an effect's tool chose to make nothing (an outcome)


# What a decision's refusal may say: the codes above the failure types.
REFUSALS = frozenset(list(Code)[:list(Code).index(Code.AGENT_FAILED)])
# Failures whose activity Temporal tries again (every other failure is final): a store, a
# model, a server or a lock may be back at the next attempt.
RETRIED = frozenset({Code.TOOL_BUSY, Code.ATTEMPT_TIMED_OUT, Code.MCP_TRANSPORT_ERROR,
                     Code.MODEL_UNAVAILABLE, Code.STORE_ENTRY_MISSING, Code.STORE_UNAVAILABLE,
                     Code.PAYLOAD_MISSING, Code.PAYLOAD_STORE_UNAVAILABLE,
                     Code.WEBHOOK_UNREACHABLE, Code.EMPTY_REPLY})
# A tool's failures that say its effect was certainly not made (nothing to reconcile).
NOT_MADE = (Code.BAD_TOOL_ARGUMENTS, Code.EFFECT_CONFLICT, Code.EFFECT_REFUSED)
# A call that failed on one of these waits for its store, never failing its run.
STORE_WAITS = (Code.STORE_ENTRY_MISSING, Code.STORE_UNAVAILABLE, Code.PAYLOAD_STORE_UNAVAILABLE,
               Code.PAYLOAD_MISSING)


class TowerError(Exception):
    """The root of every error Tower raises: ``code`` says what went wrong.

    A subclass names its kind with ``CODE``, which registers it for ``rebuilt`` (of two classes
    with one code, the first defined). ``retryable`` (None: by the code, ``RETRIED``) is
    whether Temporal tries a failed activity again; ``retry_after`` asks for that delay."""

    CODE: ClassVar[Code] = Code.BAD_SETTINGS
    # What rides beside the message in the failure's details, by attribute (JSON values).
    FIELDS: ClassVar[tuple[str, ...]] = ()
    _registry: ClassVar[dict[Code, type[TowerError]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "CODE" in cls.__dict__:
            TowerError._registry.setdefault(cls.CODE, cls)

    def __init__(self, message: str = "", *, code: Code | None = None,
                 retryable: bool | None = None, retry_after: timedelta | None = None
                 ) -> None:
        super().__init__(message)
        self.code: str = code or self.CODE
        self.retryable = self.code in RETRIED if retryable is None else retryable
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        """The words sent across a boundary (the message a person reads)."""
        return str(self)

    @classmethod
    def rebuild(cls, message: str, code: Code, fields: dict[str, Any]) -> Self:
        """The error again from what crossed: its message, code and ``FIELDS``."""
        error = cls.__new__(cls)
        TowerError.__init__(error, message, code=code)
        for name in cls.FIELDS:
            setattr(error, name, fields.get(name))
        return error


# The engine's own errors, small and precise (after python-statemachine).


class InvalidGraph(TowerError):
    """A graph was built wrong; raised when the agent's module is imported."""

    CODE = Code.INVALID_GRAPH

    def __init__(self, graph: str, problem: str) -> None:
        super().__init__(f"graph {graph!r} is invalid: {problem}")
        self.graph, self.problem = graph, problem


class IllegalTransition(TowerError):
    """A move that is not declared or whose guard failed; it never happens."""

    CODE = Code.ILLEGAL_TRANSITION

    def __init__(self, source: str, target: str, why: str) -> None:
        super().__init__(f"illegal transition {source} -> {target}: {why}")
        self.source, self.target, self.why = source, target, why


class NodeFailed(TowerError):
    """A node could not do its work (a tool refused, model output stayed invalid): the run
    records why and moves to FAILED instead of retrying forever."""

    CODE = Code.NODE_FAILED


class EffectRefused(NodeFailed):
    """A side effect refused: an invariant does not hold, nothing was done, and retrying
    cannot change that. A tool raises it (``tower.effects``); the calling node gets it back
    with ``tool`` filled in and may route on ``code`` (the tool's own word)."""

    CODE = Code.EFFECT_REFUSED
    FIELDS = ("code", "tool")

    def __init__(self, code: str, reason: str, *, tool: str = "") -> None:
        super().__init__(f"{tool + ' ' if tool else ''}refused ({code}): {reason}")
        self.tool, self.code, self.reason = tool, code, reason

    @property
    def message(self) -> str:
        return self.reason

    @classmethod
    def rebuild(cls, message: str, code: Code, fields: dict[str, Any]) -> Self:
        return cls(str(fields.get("code") or ""), message, tool=str(fields.get("tool") or ""))


class DecisionRefused(TowerError):
    """The run refused the decision; nothing changed. ``code`` says why (never read the
    words); None only from a run too old to send one."""

    CODE = Code.DECISION_REFUSED
    code: Code | None  # type: ignore[assignment]  # a refusal code; None: the run gave none

    def __init__(self, reason: str, *, code: Code | None = None) -> None:
        super().__init__(reason)
        self.reason, self.code = reason, code

    @property
    def unknown_key(self) -> bool:
        """Signed with a key the run's roster did not have when it judged it."""
        return self.code == Code.UNKNOWN_KEY

    @classmethod
    def rebuild(cls, message: str, code: Code, fields: dict[str, Any]) -> Self:
        # Its code rides alone in the details (the registry reads it): never the words.
        return cls(message, code=fields.get("code"))


class AgentFailed(TowerError):
    """A run ended FAILED: its execution fails with this (final), naming agent, node, step."""

    CODE = Code.AGENT_FAILED
    FIELDS = ("agent", "node", "step", "reason")

    def __init__(self, reason: str, *, agent: str = "", node: str = "", step: int = 0) -> None:
        super().__init__(reason)
        self.reason, self.agent, self.node, self.step = reason, agent, node, step

    @classmethod
    def rebuild(cls, message: str, code: Code, fields: dict[str, Any]) -> Self:
        step = fields.get("step")
        return cls(message, agent=str(fields.get("agent", "")),
                   node=str(fields.get("node", "")), step=step if isinstance(step, int) else 0)


def failure(exc: TowerError, *, benign: bool = False) -> ApplicationError:
    """``exc`` as the failure Temporal carries: its type is the code (a refusal's, its
    class's: the refusal code rides in the details), final unless retryable. ``benign``: an
    expected failure, logged quietly and not counted as an error in the SDK's metrics."""
    from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

    kind = exc.CODE if exc.code in REFUSALS or exc.code not in set(Code) else exc.code
    if kind == Code.DECISION_REFUSED:  # the contract: the refusal code alone, as details[0]
        details: list[Any] = [str(exc.code or Code.MALFORMED)]
    else:
        details = [{name: getattr(exc, name) for name in exc.FIELDS}] if exc.FIELDS else []
    category = ApplicationErrorCategory.BENIGN if benign else None
    return ApplicationError(exc.message, *details, type=kind,
                            non_retryable=not exc.retryable, next_retry_delay=exc.retry_after,
                            **({"category": category} if category else {}))


def rebuilt(exc: BaseException | None) -> TowerError | None:
    """The Tower error ``exc`` carries (itself, or the first failure of a Tower type along
    its causes), or None."""
    from temporalio.exceptions import ApplicationError

    seen = exc
    while seen is not None:
        if isinstance(seen, TowerError):
            return seen
        if isinstance(seen, ApplicationError) and seen.type in set(Code):
            code = Code(seen.type)
            cls = TowerError._registry.get(code, TowerError)
            return cls.rebuild(seen.message, code, _fields(code, list(seen.details)))
        seen = getattr(seen, "cause", None) or seen.__cause__
    return None


def _fields(code: Code, details: list[Any]) -> dict[str, Any]:
    first = details[0] if details else None
    if code == Code.DECISION_REFUSED:
        return {"code": Code(first) if isinstance(first, str) and first in REFUSALS else None}
    return first if isinstance(first, dict) else {}


def brief(exc: ValidationError) -> str:
    """A validation error's first five problems, one line: ``where: what; ...``."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                     for e in exc.errors()[:5])


def code_of(exc: BaseException | None) -> Code | None:
    """The failure code ``exc`` carries (see ``rebuilt``), or None."""
    found = rebuilt(exc)
    return Code(found.code) if found is not None and found.code in set(Code) else None


def failure_reason(exc: BaseException) -> str:
    """What failed, in the failing call's own words (an activity's message is its cause's)."""
    from temporalio.exceptions import ActivityError, ApplicationError

    while isinstance(exc, ActivityError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, ApplicationError) and exc.type:
        return f"{exc.type}: {exc.message}"
    return str(exc)


def waits_for_store(exc: BaseException) -> bool:
    """Whether a call that failed with ``exc`` waits for its store: a store failure along
    its causes (an input the SDK could not decode has the store's failure as its cause)."""
    from temporalio.exceptions import ActivityError, ApplicationError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ApplicationError) and seen.type in STORE_WAITS:
            return True
        seen = seen.cause if isinstance(seen, ActivityError) else seen.__cause__
    return False
