"""The mutation audit's generator (devtools/opmutate.py): each rule makes its mutant at its
one place, the rest of the text as it was; docstrings, messages and annotations are left
alone."""

from __future__ import annotations

from devtools.opmutate import mutants

SOURCE = '''"""A docstring: a < b and not c."""


def f(a: int, b: list[int] = None) -> bool:
    """Its docstring, 1 + 2."""
    x = a + 1  # a comment
    x -= 2
    if not (a <= 3 or a in b) and x is None:
        return True
    for _ in b:
        break
    return f"{a < 2}" == "%d" % a
'''


def test_each_rule_mutates_its_one_place_and_nothing_else():
    got = mutants(SOURCE)
    assert [(m.line, m.what) for m in got] == [
        (6, "+ -> -"), (6, "1 -> 2"), (7, "-= -> +="), (7, "2 -> 3"), (8, "not dropped"),
        (8, "<= -> <"), (8, "3 -> 4"), (8, "or -> and"), (8, "in -> not in"), (8, "and -> or"),
        (8, "is -> is not"), (9, "True -> False"), (11, "break -> continue"),
        (12, "== -> !=")]
    for m in got:
        new = m.apply(SOURCE)
        before, after = SOURCE[:m.start], SOURCE[m.end:]
        assert new.startswith(before) and new.endswith(after) and new != SOURCE, m
    assert got[4].apply(SOURCE).splitlines()[7] == "    if  (a <= 3 or a in b) and x is None:"
