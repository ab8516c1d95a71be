from __future__ import annotations

import pytest

from hpcjobs.errors import BadInputError
from hpcjobs.hostlist import expand


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[1-2],gpu[08-10]", ["n1", "n2", "gpu08", "gpu09", "gpu10"]),
        ("a[1,3-4]b", ["a1b", "a3b", "a4b"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("x,y", ["x", "y"]),
    ],
)
def test_expand(text: str, hosts: list[str]) -> None:
    assert expand(text) == hosts


@pytest.mark.parametrize("text", ["n[1-", "n1]", "n[a-b]", "n[3-1]"])
def test_malformed(text: str) -> None:
    with pytest.raises(BadInputError):
        expand(text)
