"""Laravel's ``Encrypter`` format (``Illuminate\\Encryption\\Encrypter``, Laravel 8).

``encrypt`` produces ``base64(json({"iv", "value", "mac", "tag"}))`` where
``value`` is the base64 ciphertext. CBC ciphers carry an HMAC-SHA256 of
``iv + value`` (hex) keyed with the app key, compared in constant time on
decrypt; GCM ciphers carry a 16-byte tag instead. Like Laravel, ``encrypt``
serializes the value first unless told not to, and ``decrypt`` unserializes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kombu_sqlqueue.limits import MAX_JSON_DEPTH, json_depth_exceeds

from . import php_serialize
from .exceptions import DecryptError, EncryptionKeyError, PhpSerializeError

#: Laravel 8's ciphers: key size in bytes and whether the cipher is AEAD.
CIPHERS = {
    "aes-128-cbc": (16, False),
    "aes-256-cbc": (32, False),
    "aes-128-gcm": (16, True),
    "aes-256-gcm": (32, True),
}


def parse_app_key(key: str | bytes) -> bytes:
    """The raw key from Laravel's ``APP_KEY`` (``base64:…``) or raw bytes."""
    if isinstance(key, str):
        if key.startswith("base64:"):
            try:
                return base64.b64decode(key[7:], validate=True)
            except binascii.Error as exc:
                raise EncryptionKeyError(f"APP_KEY after 'base64:' is not base64: {exc}") from exc
        return key.encode("utf-8")
    return bytes(key)


def _envelope(payload: str | bytes) -> Any:
    """The JSON inside an encrypted string (PHP's ``json_decode(base64_decode($payload))``);
    ValueError / TypeError when there is none."""
    raw = base64.b64decode(payload)  # binascii.Error (a ValueError) on bad padding
    if json_depth_exceeds(raw, MAX_JSON_DEPTH):
        raise ValueError(f"its JSON nests deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(raw)


def looks_encrypted(payload: str | bytes) -> bool:
    """True when ``payload`` has the shape of Laravel's encrypted string: base64 of a JSON
    object with ``iv``, ``value`` and ``mac`` (the first test of ``Encrypter::validPayload``).
    Whether it decrypts is :meth:`Encrypter.decrypt`'s question."""
    try:
        envelope = _envelope(payload)
    except (ValueError, TypeError):
        return False
    return isinstance(envelope, dict) and all(
        envelope.get(key) is not None for key in ("iv", "value", "mac")
    )


class Encrypter:
    """Encrypt and decrypt like Laravel's ``Encrypter`` for one key and cipher."""

    def __init__(self, key: str | bytes, cipher: str = "aes-256-cbc") -> None:
        cipher = cipher.lower()
        if cipher not in CIPHERS:
            raise EncryptionKeyError(
                f"unsupported cipher {cipher!r}; Laravel supports {', '.join(CIPHERS)}"
            )
        size, self.aead = CIPHERS[cipher]
        self.key = parse_app_key(key)
        if len(self.key) != size:
            raise EncryptionKeyError(
                f"{cipher} needs a {size}-byte key, the app key has {len(self.key)} bytes"
            )
        self.cipher = cipher

    def _mac(self, iv_b64: str, value_b64: str) -> str:
        message = (iv_b64 + value_b64).encode("ascii")
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def encrypt_string(self, plaintext: bytes | str) -> str:
        """Encrypt bytes as they are (Laravel's ``encryptString``)."""
        data = plaintext.encode("utf-8") if isinstance(plaintext, str) else plaintext
        if self.aead:
            iv = os.urandom(12)
            sealed = AESGCM(self.key).encrypt(iv, data, None)
            ciphertext, tag = sealed[:-16], sealed[-16:]
        else:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            padded = padder.update(data) + padder.finalize()
            encryptor = Cipher(algorithms.AES(self.key), modes.CBC(iv)).encryptor()
            ciphertext, tag = encryptor.update(padded) + encryptor.finalize(), b""
        iv_b64 = base64.b64encode(iv).decode("ascii")
        value_b64 = base64.b64encode(ciphertext).decode("ascii")
        envelope = {
            "iv": iv_b64,
            "value": value_b64,
            "mac": "" if self.aead else self._mac(iv_b64, value_b64),
            "tag": base64.b64encode(tag).decode("ascii"),
        }
        text = json.dumps(envelope, separators=(",", ":"))  # base64 needs no escaping
        return base64.b64encode(text.encode("ascii")).decode("ascii")

    def decrypt_string(self, payload: str | bytes) -> bytes:
        """Decrypt to the raw plaintext bytes (Laravel's ``decryptString``)."""
        try:
            envelope = _envelope(payload)
            if not isinstance(envelope, dict):
                raise TypeError("not a JSON object")
            iv = base64.b64decode(envelope["iv"], validate=True)
            value_b64 = envelope["value"]
            mac = envelope["mac"]
            ciphertext = base64.b64decode(value_b64, validate=True)
            tag_b64 = envelope.get("tag") or ""
            if not isinstance(tag_b64, str):
                raise TypeError("tag is not a string")
        except (ValueError, TypeError, KeyError, binascii.Error) as exc:
            raise DecryptError(f"the payload is invalid: {exc}") from exc
        if not isinstance(mac, str) or not isinstance(value_b64, str):
            raise DecryptError("the payload is invalid: iv, value and mac must be strings")
        if len(iv) != (12 if self.aead else 16):
            raise DecryptError("the payload is invalid: wrong IV length for the cipher")
        if self.aead:
            try:
                tag = base64.b64decode(tag_b64)
            except ValueError as exc:  # binascii.Error, or text that is not ASCII
                raise DecryptError(f"the payload is invalid: bad tag: {exc}") from exc
            if len(tag) != 16:
                raise DecryptError("could not decrypt the data: the GCM tag is missing")
            try:
                return AESGCM(self.key).decrypt(iv, ciphertext + tag, None)
            except InvalidTag as exc:
                raise DecryptError("could not decrypt the data: tampered or wrong key") from exc
        if tag_b64:
            raise DecryptError("unable to use a tag: the cipher does not support AEAD")
        if not mac.isascii() or not hmac.compare_digest(self._mac(envelope["iv"], value_b64), mac):
            raise DecryptError("the MAC is invalid: tampered, or encrypted with another key")
        try:
            decryptor = Cipher(algorithms.AES(self.key), modes.CBC(iv)).decryptor()
            padded = decryptor.update(ciphertext) + decryptor.finalize()
            unpadder = padding.PKCS7(128).unpadder()
            return unpadder.update(padded) + unpadder.finalize()
        except ValueError as exc:
            raise DecryptError(f"could not decrypt the data: {exc}") from exc

    def encrypt(self, value: Any, serialize: bool = True) -> str:
        """Laravel's ``encrypt()``: PHP-serialize ``value`` (unless told not to), then encrypt."""
        plaintext = php_serialize.dumps(value) if serialize else value
        return self.encrypt_string(plaintext)

    def decrypt(self, payload: str | bytes, unserialize: bool = True) -> Any:
        """Laravel's ``decrypt()``: decrypt, then PHP-unserialize (unless told not to)."""
        plaintext = self.decrypt_string(payload)
        if not unserialize:
            return plaintext
        try:
            return php_serialize.loads(plaintext)
        except PhpSerializeError as exc:
            raise DecryptError(f"decrypted data is not PHP-serialized: {exc}") from exc
