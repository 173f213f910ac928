"""Encryption at rest: the AES-GCM codec, key rotation, the codec server for the Web
UI, and a real run whose stored history holds only ciphertext yet replays and reads."""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from replaykit import replay
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from towercli import tower_cli

from tower.activities.model import ModelSettings
from tower.cli.codec_server import build_server
from tower.cli.devserver import dev_server_command
from tower.temporal.codec import ENCODING, CodecError, EncryptionCodec, KeyRing, new_key
from tower.temporal.payloads import tower_data_converter
from worker import build_worker
from workflows.account import AccountAgent, AccountRequest

K1, K2 = new_key(), new_key()
SECRET = b"ACC-1001"  # the account id in the question: it must never be stored in clear


def ring(spec: str) -> KeyRing:
    return KeyRing.parse(spec)


def test_roundtrip_rotation_and_unknown_keys() -> None:
    old = EncryptionCodec(ring(f"k1={K1}"))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"q": "ACC-1001"}')
    sealed = old.encrypt(plain)
    assert sealed.metadata["encoding"] == ENCODING and SECRET not in sealed.data
    assert sealed.metadata["encryption-key-id"] == b"k1"
    assert old.decrypt(sealed) == plain
    rotated = EncryptionCodec(ring(f"k2={K2},k1={K1}"))  # the newest first: it encrypts
    assert rotated.decrypt(sealed) == plain, "old payloads still read after rotation"
    assert rotated.encrypt(plain).metadata["encryption-key-id"] == b"k2"
    with pytest.raises(CodecError, match="key 'k1', which is not in TOWER_CODEC_KEYS"):
        EncryptionCodec(ring(f"k2={K2}")).decrypt(sealed)
    # The last byte flipped, never set: setting it is a no-op when it already was that byte.
    tampered = Payload(metadata=sealed.metadata,
                       data=sealed.data[:-1] + bytes([sealed.data[-1] ^ 0xFF]))
    with pytest.raises(CodecError, match="fails authentication"):
        old.decrypt(tampered)
    assert old.decrypt(plain) == plain, "payloads from before encryption pass through"


@pytest.mark.parametrize("spec, message", [
    ("k1", "is not id=base64key"),
    ("k1=!!notbase64", "not valid base64"),
    (f"k1={base64.b64encode(b'short').decode()}", "is 5 bytes; AES-256 needs 32"),
    (f"k1={K1},k1={K2}", "listed twice"),
    (f"bad id={K1}", "must be letters, digits"),
], ids=["no-key", "not-base64", "short", "twice", "bad-id"])  # fixed: the keys are random
def test_bad_keys_are_refused_clearly(spec: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        KeyRing.parse(spec)


TOKEN = "codec-test-token-0123456789"


def _post(url: str, body: bytes, origin: str | None = "http://localhost:8233",
          method: str = "POST", token: str | None = TOKEN) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json", "X-Namespace": "default"}
    if origin:
        headers["Origin"] = origin
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body if method == "POST" else None, method=method,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_keys_from_a_mounted_secret_file(tmp_path: Path) -> None:
    """TOWER_CODEC_KEYS_FILE: how docker-compose.yml hands the keys over (a secret)."""
    secret = tmp_path / "codec-keys"
    key = new_key()
    secret.write_text(f"k1={key}\n")
    ring = KeyRing.from_env({"TOWER_CODEC_KEYS_FILE": str(secret)})
    assert ring is not None and ring.current == "k1" and list(ring.keys) == ["k1"]
    # The variable wins over the file; no setting at all means no encryption.
    both = {"TOWER_CODEC_KEYS": f"k9={key}", "TOWER_CODEC_KEYS_FILE": str(secret)}
    assert KeyRing.from_env(both).current == "k9"  # type: ignore[union-attr]
    assert KeyRing.from_env({}) is None
    secret.write_text("  \n")
    with pytest.raises(CodecError, match="codec-keys is empty"):
        KeyRing.from_env({"TOWER_CODEC_KEYS_FILE": str(secret)})
    with pytest.raises(CodecError, match="nope: No such file or directory"):
        KeyRing.from_env({"TOWER_CODEC_KEYS_FILE": str(tmp_path / "nope")})


@pytest.fixture
def codec_url() -> Iterator[str]:
    server = build_server(EncryptionCodec(ring(f"k1={K1}")), token=TOKEN, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


PLAIN = Payloads(payloads=[Payload(metadata={"encoding": b"json/plain"}, data=b'"ACC-1001"')])


def test_codec_server_encodes_decodes_with_cors_for_the_ui(codec_url: str) -> None:
    base = codec_url
    status, headers, body = _post(f"{base}/encode", json_format.MessageToJson(PLAIN).encode())
    assert status == 200 and headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
    encoded = json_format.Parse(body, Payloads())
    assert encoded.payloads[0].metadata["encoding"] == ENCODING
    status, _, body = _post(f"{base}/decode", body)
    assert status == 200 and json_format.Parse(body, Payloads()) == PLAIN
    status, headers, _ = _post(f"{base}/decode", b"", method="OPTIONS", token=None)
    assert status == 200 and "X-Namespace" in headers["Access-Control-Allow-Headers"]
    status, _, body = _post(f"{base}/decode", b"{not json")
    assert status == 400 and "not a Payloads JSON" in json.loads(body)["error"]
    foreign = EncryptionCodec(ring(f"k9={K2}")).encrypt(PLAIN.payloads[0])
    status, _, body = _post(f"{base}/decode", json_format.MessageToJson(
        Payloads(payloads=[foreign])).encode())
    assert status == 400 and "'k9'" in json.loads(body)["error"]
    assert _post(f"{base}/nope", b"{}")[0] == 404
    # The dev server's UI cannot send headers: its endpoint URL carries the token instead.
    status, _, body = _post(f"{base}/{TOKEN}/encode", json_format.MessageToJson(PLAIN).encode(),
                            token=None)
    assert status == 200 and json_format.Parse(body, Payloads()).payloads[0].data != b""


def test_codec_server_decodes_nothing_for_strangers(codec_url: str) -> None:
    """Whoever can call /decode reads every payload: without the token, or from a page of
    another origin, the answer is a refusal that carries no payload."""
    sealed = EncryptionCodec(ring(f"k1={K1}")).encrypt(PLAIN.payloads[0])
    body = json_format.MessageToJson(Payloads(payloads=[sealed])).encode()
    for kwargs in ({"token": None}, {"token": "codec-test-token-wrong-guess"},
                   {"token": None, "origin": None}, {"origin": "http://evil.example"},
                   {"origin": "http://evil.example", "token": None}):
        for path in ("/decode", "/encode", "/x/decode", f"/{TOKEN[:-1]}/decode"):
            status, headers, answer = _post(codec_url + path, body, **kwargs)
            assert status in (401, 403), (kwargs, path, status)
            assert b"ACC-1001" not in answer
            if kwargs.get("origin") == "http://evil.example":  # its page may not even read it
                assert "Access-Control-Allow-Origin" not in headers
    status, headers, _ = _post(f"{codec_url}/decode", b"", origin="http://evil.example",
                               method="OPTIONS", token=None)
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    # The `temporal` CLI (no Origin header) with the token is served.
    status, _, answer = _post(f"{codec_url}/decode", body, origin=None)
    assert status == 200 and json_format.Parse(answer, Payloads()) == PLAIN
    with pytest.raises(ValueError, match="at least 16"):
        build_server(EncryptionCodec(ring(f"k1={K1}")), token="short", port=0)


def test_dev_server_gets_the_ui_codec_endpoint() -> None:
    from tower.cli.devserver import command
    args = command.make_context("dev", ["--ui-codec-endpoint", "http://127.0.0.1:8081",
                                        "--tenant", "acme"]).params
    assert args["ui_codec_endpoint"] == "http://127.0.0.1:8081" and args["tenants"] == ("acme",)
    cmd = dev_server_command(extra=["--ui-codec-endpoint", args["ui_codec_endpoint"]])
    assert cmd[cmd.index("--ui-codec-endpoint") + 1] == "http://127.0.0.1:8081"


def _stored_bytes(history: WorkflowHistory) -> bytes:
    return b"".join(e.SerializeToString() for e in history.events)


async def _run(client: Client, task_queue: str, db_path: Path) -> WorkflowHistory:
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
            id=f"codec-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await handle.result()
    assert state.status == "DONE" and "ACC-1001" in state.answer  # decrypted for the client
    return await handle.fetch_history()


async def _tower(client: Client, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    full = {**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "TEMPORAL_NAMESPACE": client.namespace, **env}
    return await tower_cli(list(args), env=full)


async def test_history_is_ciphertext_yet_replays_and_reads(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Control: without keys the account id is in the stored history, in clear.
    plain_history = await _run(client, task_queue, db_path)
    assert SECRET in _stored_bytes(plain_history)

    keys = {"TOWER_CODEC_KEYS": f"k2={K2},k1={K1}", "TOWER_PAYLOAD_DIR": str(tmp_path)}
    sealed = Client(client.service_client, namespace=client.namespace,
                    data_converter=tower_data_converter(env=keys))
    history = await _run(sealed, f"{task_queue}-enc", db_path)
    assert SECRET not in _stored_bytes(history)
    assert b"lookup_account" in _stored_bytes(history), "activity names stay readable"
    scheduled = [e.activity_task_scheduled_event_attributes for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    for attrs in scheduled:
        for p in attrs.input.payloads:
            assert p.metadata["encoding"] == ENCODING and p.metadata["encryption-key-id"] == b"k2"

    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    [replayed] = await replay([(history.workflow_id, history)], namespace=client.namespace)
    assert replayed.ok and [t.target for t in replayed.log][-1] == "DONE"
    code, out, err = await _tower(client, keys, "state", history.workflow_id)
    assert code == 0, err
    assert "ACC-1001" in json.loads(out)["answer"]
    code, out, err = await _tower(client, keys, "inspect", history.workflow_id)
    assert code == 0 and "lookup_account" in out, err
    code, _, err = await _tower(client, {"TOWER_CODEC_KEYS": f"k3={new_key()}"}, "state",
                                history.workflow_id)
    assert code != 0 and "k2" in err, "the wrong keys cannot read the run"
    # No keys at all: one line that says so, from state and inspect alike (not a traceback,
    # and not "does not replay against the current code": the code is fine).
    for command in ("state", "inspect"):
        code, out, err = await _tower(client, {"TOWER_CODEC_KEYS": ""}, command,
                                      history.workflow_id)
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (command, err)
        assert err.startswith("error: ") and "TOWER_CODEC_KEYS is not set" in err
        assert "replay" not in err and "'k2'" in err
