"""Hash keys: the compact in-memory form of outcome hashes (text at the edges only).

A hash's text is `<prefix><64 lowercase hex digits>` (`read:9f…`, `error:04…`, a bare digest)
or, in privacy mode, whatever the edge sent. Its key is `prefix.encode() + digest` (32 raw
bytes, ~80 B allocated instead of ~128 for the text) when the text has that form, else the
text itself. The mapping is one-to-one (the digest is the last 32 bytes; a `str` key never
equals a `bytes` one), so two keys are equal exactly when their texts are: the rules compare
keys, and the text is rebuilt only where it is shown (warning keys, messages, evidence).
Records keep their outcome's key (the args hash stays text: detectors/records.py says why;
docs/performance.md); the stored state's format is unchanged (docs/wire-format.md,
"Run state").
"""

from __future__ import annotations

import re
from typing import Final, TypeAlias

__all__ = ["HashKey", "hash_key", "hash_text"]

HashKey: TypeAlias = str | bytes

_DIGEST_HEX = 64
_DIGEST_BYTES = 32
# The last 64 characters, exactly (a `$` anchor would also match before a trailing newline).
_HEX64 = re.compile(r"[0-9a-f]{64}")
# A looping run's verdicts name the same outcome at every call: its text is memoised (bounded,
# emptied when full, as the engine's other caches; docs/performance.md).
# The same memo read the other way: `loopguard compare` hashes each outcome once for both
# policies as text (detectors/process.py `hash_outcome`) and the engine takes its key back.
_TEXT_ENTRIES: Final = 1024
_TEXTS: dict[bytes, str] = {}
_KEYS: dict[str, bytes] = {}


def hash_key(text: str) -> HashKey:
    """The key of a hash's text (the text itself when it does not end in a 64-hex digest)."""
    known = _KEYS.get(text)
    if known is not None:
        return known
    n = len(text)
    if n < _DIGEST_HEX or _HEX64.fullmatch(text, n - _DIGEST_HEX) is None:
        return text
    return text[:-_DIGEST_HEX].encode("utf-8", "surrogatepass") + bytes.fromhex(text[-_DIGEST_HEX:])


def hash_text(key: HashKey) -> str:
    """The text a key stands for (`hash_key`'s inverse)."""
    if type(key) is str:
        return key
    assert isinstance(key, bytes)
    text = _TEXTS.get(key)
    if text is None:
        prefix = key[:-_DIGEST_BYTES]
        text = key[-_DIGEST_BYTES:].hex()
        if prefix:
            text = prefix.decode("utf-8", "surrogatepass") + text
        if len(_TEXTS) >= _TEXT_ENTRIES:
            _TEXTS.clear()
            _KEYS.clear()
        _TEXTS[key] = text
        _KEYS[text] = key
    return text
