"""The lookup check's near-miss hint (``Catalogue.nearest``): closest kinds first, so a swap of two neighbouring
characters (the wrong-SKU incident, docs/design.md#rules) names the entry it came from, even when one-character
changes of the value are in the catalogue too."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from extractor.rules.lookup import Catalogue


def test_a_swap_is_named_before_one_character_changes() -> None:
    # the README's example: 483902 is 483920 with its last two digits swapped, and one digit away from three
    # other entries that sort before 483920
    catalogue = Catalogue(["483920", "483900", "483901", "483903"], "skus.csv")
    assert [(n.entry, n.difference) for n in catalogue.nearest("483902")] == [
        ("483920", "last two digits swapped"), ("483900", "digit 6 changed (2 -> 0)"),
        ("483901", "digit 6 changed (2 -> 1)")]


def test_kinds_are_listed_closest_first() -> None:
    # 12345 against a swap, a change, a missing and an extra character, and the same code behind a prefix
    catalogue = Catalogue(["12354", "02345", "123456", "1235", "SKU-12345"], "codes.csv")
    assert [n.entry for n in catalogue.nearest("12345", limit=5)] == ["12354", "02345", "123456", "1235",
                                                                     "SKU-12345"]
    assert [n.entry for n in catalogue.nearest("12345")] == ["12354", "02345", "123456"]


def _transpositions(code: str) -> list[str]:
    return [code[:i] + code[i + 1] + code[i] + code[i + 2:] for i in range(len(code) - 1) if code[i] != code[i + 1]]


def _sweep(codes: list[str]) -> tuple[int, int, int]:
    """Every adjacent transposition of every code that is not itself an entry: (probes, named, named first)."""
    catalogue = Catalogue(codes, "sweep.csv")
    probes = named = first = 0
    for code in codes:
        for value in _transpositions(code):
            if value in catalogue:
                continue
            hint = [n.entry for n in catalogue.nearest(value)]
            probes += 1
            named += code in hint
            first += hint[:1] == [code]
    return probes, named, first


def test_sweep_every_adjacent_transposition_of_5000_codes_names_the_true_entry() -> None:
    rng = random.Random(26)
    shapes = {
        "6 digits": [f"{n:06d}" for n in rng.sample(range(1_000_000), 5000)],
        "8 digits": [f"{n:08d}" for n in rng.sample(range(100_000_000), 5000)],
        # dense: 5,000 of the 10,000 4-digit codes, so most transpositions are one change from other entries too
        "4 digits, dense": [f"{n:04d}" for n in rng.sample(range(10_000), 5000)],
        "prefixed": [f"{rng.choice(['SKU', 'PN', 'AB'])}-{n:05d}{rng.choice('ABC')}"
                     for n in rng.sample(range(100_000), 5000)],
    }
    for shape, codes in shapes.items():
        probes, named, _ = _sweep(codes)
        assert probes > 4000, shape
        assert named == probes, f"{shape}: {named} of {probes} transpositions named their entry"


def test_sweep_names_the_true_entry_first_when_it_is_the_only_swap() -> None:
    rng = random.Random(83)
    codes = [f"{n:06d}" for n in rng.sample(range(1_000_000), 5000)]
    catalogue = Catalogue(codes, "sweep.csv")
    for code in codes:
        for value in _transpositions(code):
            if value in catalogue:
                continue
            swaps = catalogue.values.intersection(_transpositions(value))
            hint = catalogue.nearest(value)
            if swaps == {code}:
                assert hint[0].entry == code and "swapped" in hint[0].difference, (value, hint)


@settings(max_examples=300, deadline=None)
@given(codes=st.lists(st.text("0123456789AB-", min_size=2, max_size=9), min_size=1, max_size=60, unique=True),
       pick=st.integers(min_value=0), at=st.integers(min_value=0))
def test_property_a_transposed_entry_is_named(codes: list[str], pick: int, at: int) -> None:
    code = codes[pick % len(codes)]
    options = _transpositions(code)
    catalogue = Catalogue(codes, "codes.csv")
    if not options or options[at % len(options)] in catalogue:
        return
    value = options[at % len(options)]
    swaps = catalogue.values.intersection(_transpositions(value))
    hint = [n.entry for n in catalogue.nearest(value)]
    if len(swaps) <= 3:  # the hint keeps three; more than three entries one swap away is the only way to lose it
        assert code in hint, (value, hint)
    assert hint[:len(swaps)] == sorted(swaps)[:3]
