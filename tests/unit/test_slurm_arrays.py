"""Array specs and splitting them to fit MaxArraySize."""

from __future__ import annotations

import pytest

from hpcjobs.errors import BadInputError
from hpcjobs.slurm.arrays import compress, parse_array, split_array


def test_parse_forms() -> None:
    spec = parse_array("0-999%50")
    assert len(spec.indices) == 1000 and spec.throttle == 50
    assert parse_array("1,3,5-9:2").indices == (1, 3, 5, 7, 9)
    assert parse_array("7").indices == (7,)
    assert parse_array("3,1,3").indices == (1, 3)


@pytest.mark.parametrize("bad", ["", "a-b", "5-1", "1-10%0", "1-10%x", "0-9:0", "1;2", "-3"])
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(BadInputError):
        parse_array(bad)


def test_compress_round_trip() -> None:
    for text in ["0-999", "1,3", "0-100:10", "1,2,3,10,20,30,31", "5"]:
        spec = parse_array(text)
        assert parse_array(compress(spec.indices)).indices == spec.indices
    assert compress((0, 1, 2, 3)) == "0-3"
    assert compress((0, 10, 20)) == "0-20:10"
    assert compress((1, 5)) == "1,5"


def test_fitting_array_is_one_unchanged_chunk() -> None:
    spec = parse_array("0-1000%50")
    (chunk,) = split_array(spec, 1001)
    assert chunk.offset == 0 and chunk.spec == spec


def test_large_array_splits_with_offsets_and_shared_throttle() -> None:
    spec = parse_array("0-2499%50")
    chunks = split_array(spec, 1001)
    assert [c.offset for c in chunks] == [0, 1001, 2002]
    assert [c.spec.render() for c in chunks] == ["0-1000%17", "0-1000%17", "0-497%16"]
    assert sum(c.spec.throttle or 0 for c in chunks) == 50
    every = [i for c in chunks for i in c.global_indices]
    assert every == list(range(2500))
    assert all(c.spec.max_index < 1001 for c in chunks)


def test_high_indices_are_rebased_into_one_chunk() -> None:
    chunks = split_array(parse_array("5000-5099"), 1001)
    assert len(chunks) == 1 and chunks[0].offset == 5000
    assert chunks[0].spec.render() == "0-99"


def test_strided_and_sparse() -> None:
    chunks = split_array(parse_array("0-3000:1000,2500"), 1001)
    assert [c.global_indices for c in chunks] == [(0, 1000), (2000, 2500, 3000)]
    assert chunks[1].spec.render() == "0-1000:500"


def test_small_throttle_gives_every_chunk_one() -> None:
    chunks = split_array(parse_array("0-2999%2"), 1000)
    assert [c.spec.throttle for c in chunks] == [1, 1, 1]
