"""The operator mutations of one C file (runtime/**/*.c, .h), for devtools/opmutate.py.

The file is cut into tokens with its comments, string and character literals and
preprocessor lines (a `#` line and the lines its backslashes continue) set aside, so none of
them is mutated. The rules, on the tokens left: `<` `<=`, `>` `>=`, `==` `!=` by their
neighbour and back; `&&` by `||` and back; a binary `+` by `-` and back (binary: after a name,
a number, `)` or `]`), `+=` by `-=` and back; a whole number n (decimal or hex, its suffix
kept) by n + 1; `!` dropped; `break` by `continue` and back, where the innermost braced
`switch` or loop around it is a loop (a `continue` in a switch means its loop; a `break`
directly in a switch is left alone). A mutant's text differs from the file at the one place
only. Nothing checks that a mutant compiles: the build the tests make is the check (the
runtime compiles with -Wall -Wextra -Werror, so a mutant the compiler refuses is killed).
"""

from __future__ import annotations

import re

from devtools.opmutant import Mutant

_TOKEN = re.compile(r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<number>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.])*)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op><<=|>>=|->|\+\+|--|&&|\|\||<=|>=|==|!=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|<<|>>|[^\s])
  | (?P<space>\s+)
""", re.S | re.X)
_INT = re.compile(r"(0[xX][0-9A-Fa-f]+|[0-9]+)([uUlL]*)")
SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "&&": "||",
        "||": "&&", "+=": "-=", "-=": "+=", "break": "continue", "continue": "break"}
LOOPS = ("for", "while", "do")


def _preprocessor_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of every preprocessor line with its continuations."""
    spans = []
    for m in re.finditer(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", text, re.M):
        spans.append((m.start(), m.end()))
    return spans


def tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) of the code's tokens: no comment, string, space or preprocessor
    line among them."""
    spans = _preprocessor_spans(text)
    out, at, k = [], 0, 0
    while at < len(text):
        while k < len(spans) and spans[k][1] <= at:
            k += 1
        if k < len(spans) and spans[k][0] <= at < spans[k][1]:
            at = spans[k][1]
            continue
        m = _TOKEN.match(text, at)
        if m is None:  # an unterminated comment or literal: the rest is no code
            break
        kind = m.lastgroup or "op"
        if kind not in ("comment", "string", "space"):
            out.append((kind, m.group(), at))
        at = m.end()
    return out


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def mutants(text: str) -> list[Mutant]:
    """Every mutant of the C `text` the rules make, in the order of the text."""
    toks = tokens(text)
    found: list[Mutant] = []
    braces: list[str] = []  # per open brace: "switch", "loop" or ""
    pending = ""  # what the next `{` opens
    depth = 0  # of parentheses
    for i, (kind, tok, at) in enumerate(toks):
        prev = toks[i - 1] if i else ("op", ";", 0)

        def add(new: str, what: str, tok: str = tok, at: int = at) -> None:
            found.append(Mutant(_line(text, at), at, at + len(tok), new, what))

        if kind == "name" and tok == "switch":
            pending = "switch"
        elif kind == "name" and tok in LOOPS:
            pending = "loop"
        elif tok == "{":
            braces.append(pending)
            pending = ""
        elif tok == "}":
            if braces:
                braces.pop()
        elif tok in ("(", ")"):
            depth += 1 if tok == "(" else -1
        elif tok == ";" and depth == 0:
            pending = ""  # a statement ended: a loop's body without braces, or `do`'s end
        if tok in ("break", "continue"):
            inner = next((b for b in reversed(braces) if b), "")
            if tok == "break" and inner == "loop" or tok == "continue" and inner:
                add(SWAP[tok], f"{tok} -> {SWAP[tok]}")
        elif kind == "op" and tok in SWAP:
            add(SWAP[tok], f"{tok} -> {SWAP[tok]}")
        elif kind == "op" and tok in ("+", "-") and (
                prev[0] in ("name", "number") or prev[1] in (")", "]")) and prev[1] not in (
                "return", "case", "sizeof"):
            new = "-" if tok == "+" else "+"
            add(new, f"{tok} -> {new}")
        elif kind == "op" and tok == "!":
            add("", "! dropped")
        elif kind == "number":
            m = _INT.fullmatch(tok)
            if m:
                digits, suffix = m.groups()
                hexa = digits[:2].lower() == "0x"
                n = int(digits, 16 if hexa else 8 if len(digits) > 1 and digits[0] == "0"
                        else 10)
                new = (f"0x{n + 1:x}" if hexa else f"0{n + 1:o}" if digits[0] == "0" and
                       len(digits) > 1 else str(n + 1)) + suffix
                add(new, f"{tok} -> {new}")
    return found
