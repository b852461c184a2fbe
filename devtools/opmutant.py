"""One operator mutation of a file's text, as the audit's generators make them (Python:
devtools/opmutate.py, C: devtools/opmutate_c.py) and the audit applies them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    line: int
    start: int  # offsets in the file's text
    end: int
    new: str
    what: str

    def apply(self, text: str) -> str:
        return text[:self.start] + self.new + text[self.end:]
