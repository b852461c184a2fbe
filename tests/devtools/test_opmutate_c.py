"""The mutation audit's generator of C (devtools/opmutate_c.py): each rule makes its mutant at
its one place, the rest of the text as it was; comments, strings, characters and
preprocessor lines are left alone, and so is a `break` directly in a switch."""

from __future__ import annotations

from devtools.opmutate_c import mutants

SOURCE = r'''#include <stdio.h>
#define N 3 + \
    4
/* a < b && 5 */ static int f(int x) // x == 6
{
    const char *s = "a < b 7"; char c = '<';
    switch (x) { case 1: break; }
    for (;;) {
        if (!x && x - 1 > 0x1fu) break;
        switch (x) { case 2: continue; }
    }
    x += s[0] != c;
    return -1 + (int)sizeof x;
}
'''


def test_each_rule_mutates_its_one_place_and_nothing_else():
    got = mutants(SOURCE)
    assert [(m.line, m.what) for m in got] == [
        (7, "1 -> 2"), (9, "! dropped"), (9, "&& -> ||"), (9, "- -> +"), (9, "1 -> 2"),
        (9, "> -> >="), (9, "0x1fu -> 0x20u"), (9, "break -> continue"), (10, "2 -> 3"),
        (10, "continue -> break"), (12, "+= -> -="), (12, "0 -> 1"), (12, "!= -> =="),
        (13, "1 -> 2"), (13, "+ -> -")]
    for m in got:
        new = m.apply(SOURCE)
        before, after = SOURCE[:m.start], SOURCE[m.end:]
        assert new.startswith(before) and new.endswith(after) and new != SOURCE, m
