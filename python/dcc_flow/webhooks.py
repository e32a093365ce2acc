"""Signing and checking webhook requests, for the programs that call a webhook schedule
(docs/guide/scheduler.md, "Webhooks").

A webhook schedule with ``secret_env`` accepts a request only with a valid signature of its body:

- ``hmac_sha256_hex(secret, body)``: the lowercase hex HMAC-SHA256 of ``body``, sent as
  ``X-Hub-Signature-256: sha256=<hex>`` (GitHub's form);
- ``verify_hub_signature_256(secret, body, header)``: checks such a header in constant time (a
  missing header, a bare digest without ``sha256=`` or a wrong digest is False);
- ``timestamped_signature(secret, body, timestamp=None)``: the ``X-Dcc-Flow-Signature`` header,
  ``t=<unix seconds>,v1=<hex>``, of a schedule with ``signature: timestamped`` (it resists replay:
  the server refuses a ``t`` more than the schedule's ``tolerance_secs`` from its clock).

``secret`` and ``body`` are ``str`` (encoded as UTF-8) or bytes.

    >>> from dcc_flow.webhooks import hmac_sha256_hex
    >>> hmac_sha256_hex("s3cret", b'{"date": "2024-05-01"}')[:16]
    'fe9164562c3bac81'

Each name is also importable from ``dcc_flow`` itself, as it was before this module existed.
"""

from ._schedule import hmac_sha256_hex, timestamped_signature, verify_hub_signature_256

__all__ = ["hmac_sha256_hex", "verify_hub_signature_256", "timestamped_signature"]
