/*
 * inject.c: fault injection (SHIMGEN_INJECT, docs/inject.md). The rules are parsed once,
 * with the rest of the configuration (config.c), by the grammar of shimgen/shim/inject.py
 * (inject_rules.c; its key names and limits come through facts.h), and matched against the
 * slot names: an export E is matched by pattern P when fnmatch(P, V) for V = E, E without a
 * trailing _ptsz/_ptds, or that without a trailing _v<digits>. Any error: one notice naming
 * the rule, and nothing is armed. Once the driver's targets are filled (driver.c), each
 * matched function's target moves behind its inject stub (stubs.S); no other slot changes.
 *
 * A call of a matched function asks shimgen_inject_decide: each rule that matches it counts
 * the call (an atomic counter per rule), the first that fires gives the code, returned
 * without calling the driver and recorded in the thread's error slots with the injected bit
 * (docs/traceformat.md). p draws from a counter-based hash of (seed, rule, call number), so
 * the failing calls depend only on the rules and the calls' order. A forked child counts
 * afresh.
 */

#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "inject_rules.h"
#include "stats/stats.h"
#include "base/base.h"
#include "tracefile/tracefile.h"

struct rule rules[MAX_RULES]; /* (inject_rules.h: shared with the grammar) */
static unsigned nrules;
static char rules_text[MAX_LEN]; /* the rules, each NUL-terminated */
static char refusal[4096]; /* the notice of a refused SHIMGEN_INJECT */
uint32_t fn_rules[SHIMGEN_NFUNCS];
void *shimgen_inject_next[SHIMGEN_NFUNCS];

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
