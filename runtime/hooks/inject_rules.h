/*
 * inject_rules.h: fault injection's rules as inject_rules.c parses them (SHIMGEN_INJECT's
 * grammar) and inject.c arms and decides them, inner to hooks/. Declared hidden, as the
 * build makes every definition, so that both files address them directly.
 */
#ifndef SHIMGEN_HOOKS_INJECT_RULES_H
#define SHIMGEN_HOOKS_INJECT_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

enum {
#define KEY_ENUM(KEY, name) K_##KEY,
    SHIMGEN_FOR_EACH_INJECT_KEY(KEY_ENUM)
#undef KEY_ENUM
    K_COUNT
};

#define MAX_RULES ((unsigned)SHIMGEN_INJECT_MAX_RULES)
#define MAX_LEN ((size_t)SHIMGEN_INJECT_MAX_LEN)

struct rule {
    const char *text; /* in rules_text[] */
    int code;
    int has[K_COUNT];
    uint64_t v[K_COUNT];
    double p;
    unsigned nmatched;
    int other_rank; /* rank=R, and this process is not rank R: counts nothing */
    uint64_t calls;    /* calls it matched (atomic) */
    uint64_t injected; /* calls it fired on (atomic; times=K stops at K) */
};

#pragma GCC visibility push(hidden)
extern struct rule rules[MAX_RULES];
extern uint32_t fn_rules[SHIMGEN_NFUNCS]; /* bit r: rule r matches function i */
/* Rule r of SHIMGEN_INJECT, its text `text`: parsed into rules[r], its functions' bits set
 * in fn_rules. 0, or -1 with the reason in `why`. */
int parse_rule(unsigned r, const char *text, char *why, size_t cap);
/* src (at most `max` bytes of it) with each control character escaped. */
void escape_controls(char *dst, size_t cap, const char *src, size_t max);
#pragma GCC visibility pop

#endif
