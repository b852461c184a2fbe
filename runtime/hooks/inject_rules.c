/*
 * inject_rules.c: SHIMGEN_INJECT's grammar (docs/inject.md), that of shimgen/shim/inject.py
 * (its key names and limits come through facts.h): each rule parsed into rules[] and
 * matched against the slot names (inject.c says what it is for).
 */

#define _GNU_SOURCE
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inject_rules.h"

static const char *const key_names[K_COUNT] = {
#define KEY_NAME(KEY, name) name,
    SHIMGEN_FOR_EACH_INJECT_KEY(KEY_NAME)
#undef KEY_NAME
};

__attribute__((format(printf, 3, 4))) static int refuse(char *why, size_t cap,
                                                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* Decimal digits without their leading zeros (00000000002 is 2): what a length limit is
 * about; "0" stays. */
static const char *significant(const char *s)
{
    while (s[0] == '0' && s[1])
        s++;
    return s;
}

/* Decimal digits only, from `low` to SHIMGEN_INJECT_NUMBER_MAX. */
static int parse_number(const char *s, uint64_t low, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || strlen(significant(s)) > 19 || strspn(s, "0123456789") != n)
        return 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (v < low || v > SHIMGEN_INJECT_NUMBER_MAX)
        return 0;
    *out = v;
    return 1;
}

/* 0, 1, 0.25, .5: digits with at most one '.', which has digits after it. */
static int parse_probability(const char *s, double *out)
{
    size_t n = strlen(s), dots = 0, digits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '.')
            dots++;
        else if (s[i] >= '0' && s[i] <= '9')
            digits++;
        else
            return 0;
    }
    if (n > 32 || dots > 1 || !digits || s[n - 1] == '.')
        return 0;
    *out = strtod(s, NULL);
    return *out >= 0.0 && *out <= 1.0;
}

static int parse_result(const char *s, int *code, char *why, size_t cap)
{
    size_t n = strlen(s);
    if (n && strspn(s, "0123456789") == n) {
        unsigned long long v = strlen(significant(s)) <= 10 ? strtoull(s, NULL, 10) : 0;
        if (v < 1 || v > SHIMGEN_INJECT_RESULT_MAX)
            return refuse(why, cap, "result %.200s is out of a CUresult's range", s);
        *code = (int)v;
        return 0;
    }
    if (strcmp(s, "CUDA_SUCCESS") == 0)
        return refuse(why, cap, "%.200s is no failure (an injection is a failure)", s);
#define RESULT_IS(number, name) if (strcmp(s, name) == 0) { *code = number; return 0; }
    SHIMGEN_FOR_EACH_RESULT(RESULT_IS)
#undef RESULT_IS
    return refuse(why, cap, "'%.200s' is not a CUresult name or number", s);
}

/* KEY=VALUE items after the result, in `items` (changed in place). */
static int parse_keys(struct rule *r, char *items, char *why, size_t cap)
{
    for (char *item = items, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(item, '=');
        if (eq)
            *eq = '\0';
        unsigned k = 0;
        while (k < K_COUNT && strcmp(item, key_names[k]) != 0)
            k++;
        if (k == K_COUNT)
            return refuse(why, cap, "unknown key '%.200s'", item);
        if (r->has[k])
            return refuse(why, cap, "%.200s is given twice", item);
        if (!eq || !eq[1])
            return refuse(why, cap, "%.200s has no value", item);
        r->has[k] = 1;
        uint64_t low = k == K_AFTER || k == K_SEED || k == K_RANK ? 0 : 1;
        if (k == K_P && !parse_probability(eq + 1, &r->p))
            return refuse(why, cap, "p=%.200s is not a probability from 0 to 1", eq + 1);
        if (k != K_P && !parse_number(eq + 1, low, &r->v[k]))
            return refuse(why, cap, "%s=%.200s is not a whole number from %llu to %llu", item,
                          eq + 1, (unsigned long long)low,
                          (unsigned long long)SHIMGEN_INJECT_NUMBER_MAX);
    }
    if (r->has[K_NTH] && (r->has[K_EVERY] || r->has[K_AFTER] || r->has[K_TIMES] || r->has[K_P]))
        return refuse(why, cap, "%.200s names one call: every, after, times, p cannot go with it",
                      key_names[K_NTH]);
    if (r->has[K_SEED] && !r->has[K_P])
        return refuse(why, cap, "%.200s goes with p", key_names[K_SEED]);
    return 0;
}

/* Whether pattern p matches export `name`, or it without _ptsz/_ptds, or then without _v<n>. */
static int name_matches(const char *p, const char *name)
{
    char v[256];
    size_t n = strlen(name);
    if (fnmatch(p, name, 0) == 0)
        return 1;
    if (n >= sizeof v)
        return 0;
    memcpy(v, name, n + 1);
    if (n > 5 && (strcmp(v + n - 5, "_ptsz") == 0 || strcmp(v + n - 5, "_ptds") == 0)) {
        v[n -= 5] = '\0';
        if (fnmatch(p, v, 0) == 0)
            return 1;
    }
    size_t d = n;
    while (d > 0 && v[d - 1] >= '0' && v[d - 1] <= '9')
        d--;
    if (d < n && d >= 3 && v[d - 1] == 'v' && v[d - 2] == '_') {
        v[d - 2] = '\0';
        return fnmatch(p, v, 0) == 0;
    }
    return 0;
}

/* The functions rule r's pattern takes: their bits set in fn_rules. */
static int match_rule(unsigned r, const char *pattern, char *why, size_t cap)
{
    int glob = strpbrk(pattern, "*?") != NULL;
    unsigned hits = 0;
    for (unsigned i = 0; i < SHIMGEN_NFUNCS; i++) {
        if (!name_matches(pattern, shimgen_names[i]))
            continue;
        hits++;
        if (!shimgen_result_fns[i] && !glob)
            return refuse(why, cap, "%.200s does not return a CUresult", shimgen_names[i]);
        if (shimgen_result_fns[i]) {
            fn_rules[i] |= 1u << r;
            rules[r].nmatched++;
        }
    }
    if (!hits)
        return refuse(why, cap, "%.200s matches no function the driver exports", pattern);
    if (!rules[r].nmatched)
        return refuse(why, cap, "%.200s matches only functions that return no CUresult",
                      pattern);
    return 0;
}

int parse_rule(unsigned r, const char *text, char *why, size_t cap)
{
    char buf[MAX_LEN];
    shimgen_copy_str(buf, sizeof buf, text);
    char *comma = strchr(buf, ',');
    if (comma)
        *comma++ = '\0';
    char *eq = strchr(buf, '=');
    if (!buf[0] && !comma)
        return refuse(why, cap, "an empty rule");
    if (!eq || eq == buf || !eq[1])
        return refuse(why, cap, "not PATTERN=RESULT[,KEY=VALUE...]");
    *eq = '\0';
    if (strspn(buf, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_*?") !=
        strlen(buf))
        return refuse(why, cap, "pattern '%.200s' may hold only letters, digits, _, * and ?",
                      buf);
    struct rule *ru = &rules[r];
    if (parse_result(eq + 1, &ru->code, why, cap) || (comma && parse_keys(ru, comma, why, cap)))
        return -1;
    return match_rule(r, buf, why, cap);
}

/* src (at most `max` bytes of it) with each control character escaped (\n, \r, \t,
 * \xNN), as shimgen's Python side shows a name: a notice is one line, whatever the
 * environment held. */
void escape_controls(char *dst, size_t cap, const char *src, size_t max)
{
    size_t o = 0;
    for (size_t i = 0; src[i] && i < max && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c >= 0x20 && c != 0x7f) {
            dst[o++] = (char)c;
            continue;
        }
        dst[o++] = '\\';
        if (c == '\n' || c == '\r' || c == '\t') {
            dst[o++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else {
            dst[o++] = 'x';
            dst[o++] = "0123456789abcdef"[c >> 4];
            dst[o++] = "0123456789abcdef"[c & 15];
        }
    }
    dst[o] = '\0';
}
