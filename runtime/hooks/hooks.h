/*
 * hooks.h: the hooks folder's face: fault injection (SHIMGEN_INJECT, docs/inject.md): the rules parsed once with
 * the rest of the configuration, the slots of the matched functions pointed at their inject
 * stubs (stubs.S), and the decision of each call the stubs ask for.
 */
#ifndef SHIMGEN_INJECT_H
#define SHIMGEN_INJECT_H

#include "base/base.h"

/* stubs.S: inject stub i saves the argument registers, asks shimgen_inject_decide(i), and
 * returns its code, or restores them and jumps through shimgen_inject_next[i]. */
extern void *const shimgen_inject_stubs[];
extern void *shimgen_inject_next[];

/* driver.c, once every target is filled: SHIMGEN_INJECT (shimgen_cfg.inject, as config.c
 * read it) parsed, and each matched function's target put behind its inject stub. One
 * notice: the rules armed, or the rule refused (then nothing is armed). */
void shimgen_inject_arm(void *targets[]);
void shimgen_inject_after_fork(void); /* a forked child: the rules' counts zeroed */
/* The inject stub's question: 0 to call the target, else the code to return. */
int shimgen_inject_decide(unsigned idx);

/* ---- the user's hooks (userhooks.c): put in front of their exports' targets, once the
 * targets are filled; `loaded` 0 when the driver failed to load (none is installed) ---- */
void shimgen_user_hooks_install(int loaded);
#endif
