"""Why a run refused a decision, as a code: what every surface reads (never the words).

A refusal's ``reason`` is for people and may be reworded; its ``code`` is the contract. The
run carries it on every refusal: the ``decide`` update's error (its ``details[0]``), the
audit trail of refused signals (query ``approvals``), ``tower.client.DecisionRefused``.
"""

from __future__ import annotations

from enum import StrEnum


class RefusalCode(StrEnum):
    """What was wrong with a refused decision (docs/approvals.md)."""

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
