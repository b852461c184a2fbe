"""Fault injection (SHIMGEN_INJECT, `shimgen run --inject`): the rules' grammar, kept here
once. `parse` reads a rule, `check` validates rules against a driver's exported names,
`matches` says which exports a pattern takes, `fires` is the decision of one call (the same
arithmetic as runtime/hooks/inject.c, for the tests to predict it). The key names and limits
are rendered into facts.h (SHIMGEN_INJECT_*) for the shim's own parser
(runtime/hooks/inject_rules.c).

A rule is PATTERN=RESULT[,KEY=VALUE...]; rules are separated by ';' (docs/inject.md).
Imports only cuda.py and cudaversions.py (and fnmatch): it is on `shimgen run`'s path when
--inject is given.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from ..cuda import CODES, returns_result
from ..cudaversions import newer_than_driver
from ..errors import ShimgenError

# The keys of a rule, in the order a rule is shown; facts.h: SHIMGEN_INJECT_KEY_<NAME>.
KEYS = ("nth", "every", "after", "times", "p", "seed", "rank")
# Keys that cannot go with nth (it names one call: the others would select among one).
NOT_WITH_NTH = ("every", "after", "times", "p")
SEPARATOR = ";"
MAX_RULES = 32  # the shim keeps each function's rules in a 32-bit mask
MAX_LEN = 4096  # bytes of SHIMGEN_INJECT
NUMBER_MAX = (1 << 63) - 1  # nth, every, after, times, seed, rank
RESULT_MAX = (1 << 31) - 1  # a CUresult given as a number
PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_*?")
VARIANT_SUFFIXES = ("_ptsz", "_ptds")
CUDA_SUCCESS = CODES["CUDA_SUCCESS"]


class Rule:
    """One parsed rule (a plain class: `run` imports this module)."""

    __slots__ = ("text", "pattern", "code", "nth", "every", "after", "times", "p", "seed",
                 "rank")

    def __init__(self, text: str, pattern: str, code: int) -> None:
        self.text = text
        self.pattern = pattern
        self.code = code
        self.nth = self.every = self.after = self.times = self.seed = self.rank = None
        self.p: float | None = None


def _refuse(rule: str, why: str) -> ShimgenError:
    return ShimgenError(f"--inject {rule!r}: {why}")


def _significant(digits: str) -> str:
    """Decimal digits without their leading zeros (00000000002 is 2): what a length limit
    is about."""
    return digits.lstrip("0") or "0"


def _number(rule: str, key: str, value: str, low: int) -> int:
    if not (value.isascii() and value.isdigit()) or len(_significant(value)) > 19 or \
            not low <= int(value) <= NUMBER_MAX:
        raise _refuse(rule, f"{key}={value!r} is not a whole number from {low} to {NUMBER_MAX}")
    return int(value)


def _probability(rule: str, value: str) -> float:
    whole, dot, frac = value.partition(".")
    digits = whole + frac
    if not (digits.isascii() and digits.isdigit()) or (dot and not frac) or len(value) > 32:
        raise _refuse(rule, f"p={value!r} is not a probability written as 0, 1 or 0.25")
    p = float(value if whole else "0" + value)
    if not 0.0 <= p <= 1.0:
        raise _refuse(rule, f"p={value} is outside [0, 1]")
    return p


def _result(rule: str, text: str) -> int:
    if text.isascii() and text.isdigit():
        code = int(text) if len(_significant(text)) <= 10 else RESULT_MAX + 1
        if not 1 <= code <= RESULT_MAX:
            raise _refuse(rule, f"result {text} is not a CUresult from 1 to {RESULT_MAX}" +
                          (" (an injection is a failure: CUDA_SUCCESS is refused)"
                           if code == CUDA_SUCCESS else ""))
        return code
    if text == "CUDA_SUCCESS":
        raise _refuse(rule, "CUDA_SUCCESS is no failure (an injection is a failure)")
    if text not in CODES:
        raise _refuse(rule, f"{text!r} is not a CUresult name (CUDA_ERROR_OUT_OF_MEMORY) "
                      "or number (2)")
    return CODES[text]


def parse(text: str) -> Rule:
    """One rule, checked for its form (not yet against a driver): ShimgenError otherwise."""
    if SEPARATOR in text:
        raise _refuse(text, f"one rule per --inject (no {SEPARATOR!r})")
    head, _, rest = text.partition(",")
    pattern, eq, result = head.partition("=")
    if not text:
        raise _refuse(text, "an empty rule (rules are separated by ';')")
    if not eq or not pattern or not result:
        raise _refuse(text, "not PATTERN=RESULT[,KEY=VALUE...] (cuMemAlloc_v2="
                      "CUDA_ERROR_OUT_OF_MEMORY,nth=3)")
    if not set(pattern) <= PATTERN_CHARS:
        raise _refuse(text, f"pattern {pattern!r} may hold only letters, digits, '_', "
                      "'*' and '?'")
    rule = Rule(text, pattern, _result(text, result))
    seen: set[str] = set()
    for item in rest.split(",") if rest or text.endswith(",") else ():
        key, eq, value = item.partition("=")
        if key not in KEYS:
            raise _refuse(text, f"unknown key {key!r} (keys: {', '.join(KEYS)})")
        if key in seen:
            raise _refuse(text, f"{key} is given twice")
        if not eq or not value:
            raise _refuse(text, f"{key} has no value ({key}=VALUE)")
        seen.add(key)
        if key == "p":
            rule.p = _probability(text, value)
        else:
            low = 0 if key in ("after", "seed", "rank") else 1
            setattr(rule, key, _number(text, key, value, low))
    if rule.nth is not None:
        clash = [k for k in NOT_WITH_NTH if k in seen]
        if clash:
            raise _refuse(text, f"nth names one call: {clash[0]} cannot go with it")
    if rule.seed is not None and rule.p is None:
        raise _refuse(text, "seed goes with p (the probability it draws from)")
    return rule


def split(spec: str) -> list[str]:
    """SHIMGEN_INJECT's rules."""
    return spec.split(SEPARATOR)


def variants(name: str) -> tuple[str, ...]:
    """The names a pattern is matched against for export `name`: itself, without a trailing
    _ptsz/_ptds, and that without a trailing _v<digits>."""
    base = name
    for suffix in VARIANT_SUFFIXES:
        if base.endswith(suffix):
            base = base[:-len(suffix)]
            break
    stem, sep, digits = base.rpartition("_v")
    bare = stem if sep and stem and digits.isascii() and digits.isdigit() else base
    return (name, base, bare)


def matches(pattern: str, name: str) -> bool:
    return any(fnmatchcase(v, pattern) for v in variants(name))


def is_glob(pattern: str) -> bool:
    return "*" in pattern or "?" in pattern


def matched(rule: Rule, exports: list[str], driver_version: str = "unknown") -> list[str]:
    """The exports `rule` injects into; ShimgenError when it would take none (saying when the
    driver is too old for the function), or when an exact name names a function that returns
    no CUresult (a glob leaves those out)."""
    hits = [n for n in exports if matches(rule.pattern, n)]
    if not hits:
        raise _refuse(rule.text, f"{rule.pattern} matches no function the driver exports"
                      + newer_than_driver(rule.pattern, driver_version))
    results = [n for n in hits if returns_result(n)]
    if not is_glob(rule.pattern) and len(results) < len(hits):
        bad = next(n for n in hits if not returns_result(n))
        raise _refuse(rule.text, f"{bad} does not return a CUresult: no failure can be "
                      "injected into it")
    if not results:
        raise _refuse(rule.text, f"{rule.pattern} matches only functions that return no "
                      "CUresult")
    return results


def check(rules: list[str], exports: list[str],
          driver_version: str = "unknown") -> list[tuple[Rule, list[str]]]:
    """Every rule parsed and matched against `exports` (of a driver of `driver_version`);
    the first refusal raised."""
    if len(rules) > MAX_RULES:
        raise ShimgenError(f"--inject: {len(rules)} rules, more than the {MAX_RULES} the shim "
                           "takes")
    spec = SEPARATOR.join(rules)
    if len(spec.encode()) >= MAX_LEN:
        raise ShimgenError(f"--inject: the rules take {len(spec.encode())} bytes, more than "
                           f"the {MAX_LEN - 1} SHIMGEN_INJECT may have")
    out = []
    for text in rules:
        rule = parse(text)
        out.append((rule, matched(rule, exports, driver_version)))
    return out


def exports_of(directory) -> list[str]:
    """The functions a built shim forwards, in slot order: its shim.json's "exports" (a
    shim's directory, as `shimgen build` and the cache make it), else its generated list
    src/functions.inc (a build from before shim.json recorded them)."""
    import json
    import re

    from ..runenv import SHIM_MANIFEST

    try:
        with open(f"{directory}/{SHIM_MANIFEST}", "rb") as fh:
            names = json.loads(fh.read(1 << 22)).get("exports")
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return names
        with open(f"{directory}/src/functions.inc", encoding="ascii") as fh:
            return re.findall(r"^SHIMGEN_FUNCTION\(\d+, (\w+)\)$", fh.read(), re.M)
    except (OSError, ValueError, AttributeError) as e:
        raise ShimgenError(f"--inject: cannot read the functions of the shim in {directory}: "
                           f"{getattr(e, 'strerror', None) or e}") from None


# ---- the decision of one call (runtime/hooks/inject.c: the same arithmetic) ----

MASK64 = (1 << 64) - 1


def mix(z: int) -> int:
    """splitmix64's finalizer, of z + the golden gamma."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def draw(seed: int, index: int, n: int) -> float:
    """The uniform number in [0, 1) of call n (from 1) of rule `index` (from 0)."""
    return (mix(mix(mix(seed) ^ index) ^ n) >> 11) * 2.0 ** -53


def fires(rule: Rule, index: int, n: int) -> bool:
    """Whether call n (from 1) of the calls `rule` matches is chosen, before times=K."""
    if rule.nth is not None:
        return n == rule.nth
    if rule.after is not None and n <= rule.after:
        return False
    if rule.every is not None and n % rule.every:
        return False
    return rule.p is None or draw(rule.seed or 0, index, n) < rule.p
