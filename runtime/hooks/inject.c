/*
 * inject.c: fault injection (SHIMGEN_INJECT, docs/inject.md). The rules are parsed once,
 * with the rest of the configuration (config.c), by the grammar of shimgen/shim/inject.py (its
 * key names and limits come through facts.h), and matched against the slot names: an
 * export E is matched by pattern P when fnmatch(P, V) for V = E, E without a trailing
 * _ptsz/_ptds, or that without a trailing _v<digits>. Any error: one notice naming the rule,
 * and nothing is armed. Once the driver's targets are filled (driver.c), each matched
 * function's target moves behind its inject stub (stubs.S); no other slot changes.
 *
 * A call of a matched function asks shimgen_inject_decide: each rule that matches it counts
 * the call (an atomic counter per rule), the first that fires gives the code, returned
 * without calling the driver and recorded in the thread's error slots with the injected bit
 * (docs/traceformat.md). p draws from a counter-based hash of (seed, rule, call number), so
 * the failing calls depend only on the rules and the calls' order. A forked child counts
 * afresh.
 */

#define _GNU_SOURCE
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "stats/stats.h"
#include "base/base.h"
#include "tracefile/tracefile.h"

enum {
#define KEY_ENUM(KEY, name) K_##KEY,
    SHIMGEN_FOR_EACH_INJECT_KEY(KEY_ENUM)
#undef KEY_ENUM
    K_COUNT
};
static const char *const key_names[K_COUNT] = {
#define KEY_NAME(KEY, name) name,
    SHIMGEN_FOR_EACH_INJECT_KEY(KEY_NAME)
#undef KEY_NAME
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

static struct rule rules[MAX_RULES];
static unsigned nrules;
static char rules_text[MAX_LEN]; /* the rules, each NUL-terminated */
static char refusal[4096]; /* the notice of a refused SHIMGEN_INJECT */
static uint32_t fn_rules[SHIMGEN_NFUNCS]; /* bit r: rule r matches function i */
void *shimgen_inject_next[SHIMGEN_NFUNCS];

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

static int parse_rule(unsigned r, const char *text, char *why, size_t cap)
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

/* A forked child (fork.c): its rules' counts its own (nothing when none is armed). */
void shimgen_inject_after_fork(void)
{
    for (unsigned r = 0; r < nrules; r++)
        rules[r].calls = rules[r].injected = 0;
}

static void say_armed(void)
{
    char line[1024];
    size_t o = 0;
    for (unsigned r = 0; r < nrules && o < sizeof line; r++)
        o += (size_t)snprintf(line + o, sizeof line - o, "%s'%s' on %u function%s%s",
                              r ? "; " : "", rules[r].text, rules[r].nmatched,
                              rules[r].nmatched == 1 ? "" : "s",
                              rules[r].other_rank ? " (another rank's: not armed here)" : "");
    shimgen_say("shimgen: SHIMGEN_INJECT armed: %s\n", line);
}

/* src (at most `max` bytes of it) with each control character escaped (\n, \r, \t,
 * \xNN), as shimgen's Python side shows a name: a notice is one line, whatever the
 * environment held. */
static void escape_controls(char *dst, size_t cap, const char *src, size_t max)
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

static void configure(const char *spec)
{
    if (!spec || !*spec)
        return;
    char why[512] = "";
    const char *bad = spec;
    size_t n = strlen(spec);
    int err = n >= MAX_LEN;
    if (err)
        snprintf(why, sizeof why, "SHIMGEN_INJECT is longer than %zu bytes", MAX_LEN - 1);
    else
        memcpy(rules_text, spec, n + 1);
    for (char *t = rules_text, *next; !err && t; t = next) {
        next = strchr(t, ';');
        if (next)
            *next++ = '\0';
        bad = t;
        if (nrules == MAX_RULES) {
            snprintf(why, sizeof why, "more than %u rules", MAX_RULES);
            err = 1;
            break;
        }
        rules[nrules].text = t;
        err = parse_rule(nrules, t, why, sizeof why) != 0;
        nrules++;
    }
    if (err) {
        char shown[4 * 300 + 1], reason[4 * sizeof why];
        escape_controls(shown, sizeof shown, bad, 300);
        escape_controls(reason, sizeof reason, why, sizeof why);
        snprintf(refusal, sizeof refusal, "shimgen: SHIMGEN_INJECT rule '%s' refused: "
                 "%s; no fault is injected\n", shown, reason);
        memset(fn_rules, 0, sizeof fn_rules);
        memset(rules, 0, sizeof rules);
        nrules = 0;
        return;
    }
    for (unsigned r = 0; r < nrules; r++) {
        struct rule *ru = &rules[r];
        ru->other_rank = ru->has[K_RANK] && (!shimgen_cfg.rank[0] ||
                                             strtoull(shimgen_cfg.rank, NULL, 10) != ru->v[K_RANK]);
        for (unsigned i = 0; ru->other_rank && i < SHIMGEN_NFUNCS; i++)
            fn_rules[i] &= ~(1u << r);
    }
}

/* Said when the driver is loaded, not when the shim is: a process that never calls the
 * driver (a shell that inherits LD_PRELOAD) says nothing. */
void shimgen_inject_arm(void *targets[])
{
    static int configured;
    if (configured++)
        return;
    configure(shimgen_cfg.inject);
    if (refusal[0])
        shimgen_say("%s", refusal);
    if (nrules)
        say_armed();
    for (unsigned i = 0; nrules && i < SHIMGEN_NFUNCS; i++) {
        if (!fn_rules[i])
            continue;
        shimgen_inject_next[i] = targets[i];
        __atomic_store_n(&targets[i], shimgen_inject_stubs[i], __ATOMIC_RELEASE);
    }
}

/* splitmix64's finalizer of z + the golden gamma (shimgen/shim/inject.py: mix). */
static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Whether call n (from 1) of rule r is chosen, before times=K (shimgen/shim/inject.py: fires). */
static int fires(const struct rule *ru, unsigned r, uint64_t n)
{
    if (ru->has[K_NTH])
        return n == ru->v[K_NTH];
    if (ru->has[K_AFTER] && n <= ru->v[K_AFTER])
        return 0;
    if (ru->has[K_EVERY] && n % ru->v[K_EVERY])
        return 0;
    if (!ru->has[K_P])
        return 1;
    uint64_t h = mix(mix(mix(ru->v[K_SEED]) ^ r) ^ n);
    return (double)(h >> 11) * 0x1p-53 < ru->p;
}

/* The failure in the calling thread's error slots, like the timing path's error return
 * (timing.S) but in C: the slot holding the key, or the first free one claimed with a
 * compare-and-swap, from the key's hash; none free: the block's overflow. The key has the
 * injected bit (docs/traceformat.md). A traced thread without a block (none could be
 * added: a full disk, or no memory; its calls are then counted with atomics) counts it in
 * the process's errors, which the table at exit shows and which go into a block of the
 * trace file at exit. */
static void record(unsigned idx, int code)
{
    uint64_t key = SHIMGEN_TRACEFILE_ERR_INJECTED | ((uint64_t)idx + 1) << 32 | (uint32_t)code;
    struct tstats *s = shimgen_tls_stats;
    if (s)
        shimgen_block_add_error(s, key, 1);
    else if (shimgen_cfg.trace != TRACE_OFF)
        shimgen_count_error(key);
}

int shimgen_inject_decide(unsigned idx)
{
    uint32_t m = idx < SHIMGEN_NFUNCS ? fn_rules[idx] : 0;
    int code = 0;
    for (unsigned r = 0; m; r++, m >>= 1) {
        if (!(m & 1))
            continue;
        struct rule *ru = &rules[r];
        uint64_t n = __atomic_add_fetch(&ru->calls, 1, __ATOMIC_RELAXED);
        if (code || !fires(ru, r, n))
            continue;
        uint64_t k = __atomic_fetch_add(&ru->injected, 1, __ATOMIC_RELAXED);
        if (!ru->has[K_TIMES] || k < ru->v[K_TIMES])
            code = ru->code;
    }
    if (code)
        record(idx, code);
    return code;
}
