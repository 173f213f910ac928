"""Encryption at rest: an AES-GCM PayloadCodec with keys by id and rotation.

Every payload a client or worker writes reaches the server as ciphertext; search attributes
stay in clear so runs can still be found. Keys come from TOWER_CODEC_KEYS (or the file
TOWER_CODEC_KEYS_FILE names, a mounted secret) as comma-separated ``id=base64key`` pairs of
32 random bytes (``tower codec-server --new-key``). The FIRST key encrypts; every listed key
decrypts: to rotate, put a new key first and keep the old ones while their histories are read.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from tower.contract.failures import Code, TowerError

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12


class CodecError(TowerError, ValueError):  # a ValueError: a bad key setting is a bad value
    """Keys are misconfigured, or a payload cannot be decrypted with the keys at hand."""

    CODE = Code.BAD_SETTINGS


class KeyRing:
    """Keys by id; ``current`` encrypts, all decrypt."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise CodecError("no encryption keys given")
        self.keys: dict[str, bytes] = {}
        for key_id, key in keys:
            if not key_id or not key_id.replace("-", "").replace("_", "").isalnum():
                raise CodecError(f"key id {key_id!r} must be letters, digits, - or _")
            if key_id in self.keys:
                raise CodecError(f"key id {key_id!r} is listed twice")
            if len(key) != 32:
                raise CodecError(f"key {key_id!r} is {len(key)} bytes; AES-256 needs 32")
            self.keys[key_id] = key
        self.current = keys[0][0]

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        pairs = []
        for item in (i.strip() for i in text.split(",")):
            key_id, sep, encoded = item.partition("=")
            if not sep:
                raise CodecError(f"TOWER_CODEC_KEYS entry {item!r} is not id=base64key")
            try:
                key = _b64(encoded.strip())
            except (binascii.Error, ValueError):
                raise CodecError(f"key {key_id.strip()!r} is not valid base64") from None
            pairs.append((key_id.strip(), key))
        return cls(pairs)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KeyRing | None:
        env = os.environ if env is None else env
        text = env.get("TOWER_CODEC_KEYS", "").strip()
        if not text and env.get("TOWER_CODEC_KEYS_FILE"):
            # A mounted secret (docker-compose.yml's `secrets:`), never an image layer.
            path = env["TOWER_CODEC_KEYS_FILE"]
            try:
                text = Path(path).read_text().strip()
            except OSError as exc:
                raise CodecError(f"TOWER_CODEC_KEYS_FILE {path}: {exc.strerror}") from None
            if not text:
                raise CodecError(f"TOWER_CODEC_KEYS_FILE {path} is empty")
        return cls.parse(text) if text else None


def _b64(text: str) -> bytes:
    if "-" in text or "_" in text:  # the URL-safe alphabet
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return base64.b64decode(text, validate=True)


def new_key() -> str:
    """A fresh random key, base64, for TOWER_CODEC_KEYS."""
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()


class EncryptionCodec(PayloadCodec):
    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        key_id = self.ring.current
        nonce = os.urandom(NONCE_BYTES)
        # The key id is authenticated too: a payload cannot be relabelled to another key.
        sealed = AESGCM(self.ring.keys[key_id]).encrypt(
            nonce, payload.SerializeToString(), key_id.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: key_id.encode()},
                       data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption was on: pass it through
        key_id = payload.metadata.get(KEY_ID, b"").decode()
        key = self.ring.keys.get(key_id)
        if key is None:
            raise CodecError(f"payload encrypted with key {key_id!r}, which is not in "
                             f"TOWER_CODEC_KEYS (known: {', '.join(self.ring.keys)})")
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plain = AESGCM(key).decrypt(nonce, sealed, key_id.encode())
        except InvalidTag:
            raise CodecError(f"payload under key {key_id!r} fails authentication "
                             "(tampered, or a different key with that id)") from None
        return Payload.FromString(plain)


class NoKeys(PayloadCodec):
    """The codec of a process without TOWER_CODEC_KEYS: writes in clear, and refuses an
    encrypted payload with one clear line instead of an 'unknown encoding' traceback."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for p in payloads:
            if p.metadata.get("encoding") == ENCODING:
                key_id = p.metadata.get(KEY_ID, b"").decode() or "?"
                raise CodecError(f"payloads are encrypted (key {key_id!r}) and "
                                 "TOWER_CODEC_KEYS is not set: set it to the keys the "
                                 "workers use")
        return list(payloads)


def codec_from_env(env: Mapping[str, str] | None = None) -> EncryptionCodec | None:
    ring = KeyRing.from_env(env)
    return EncryptionCodec(ring) if ring else None
