/*
 * output_name.c: the name each output is written under, from its SHIMGEN_TRACE_FILE or
 * SHIMGEN_TIMELINE_FILE pattern: "%p" and "%r" expanded, a name that the processes of a
 * job share (neither of them) taken by the first to write (claim.c), "<name>.<pid>" for
 * the others and for a forked copy; never cut short. Then the output is opened, written
 * whole (output.c). Never in a set-user-ID or set-group-ID process.
 */

#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "output.h"
#include "base/base.h"

/* A fork (without exec) of the process that loaded the shim: a copy of a program of the job,
 * which never takes a shared name (the program may write its own trace). */
static int forked_copy(void)
{
    return getpid() != shimgen_cfg.load_pid;
}

/* In SHIMGEN_TRACE_FILE (and SHIMGEN_TIMELINE_FILE), "%p" becomes the process id and "%r"
 * the rank (or "p<pid>" in a process that has none, such as a launcher). A name with
 * neither is shared by the processes of a job: the first to write takes it, the others
 * write "<name>.<pid>" (claim.c), so the name must fit with that added; a forked copy
 * always writes "<name>.<pid>". -1 when the result does not fit in `cap`: a name is never
 * cut short. */
static int trace_path(const char *pattern, char *out, size_t cap)
{
    long pid = (long)getpid();
    char piece[32];
    size_t o = 0;
    for (const char *s = pattern;; s++) {
        if (!*s) {
            if (!shimgen_shared_name(pattern))
                break;
            snprintf(piece, sizeof piece, ".%ld", pid); /* room for it, not written */
        } else if (s[0] == '%' && s[1] == 'p')
            snprintf(piece, sizeof piece, "%ld", pid), s++;
        else if (s[0] == '%' && s[1] == 'r') {
            if (shimgen_cfg.rank[0])
                snprintf(piece, sizeof piece, "%s", shimgen_cfg.rank);
            else
                snprintf(piece, sizeof piece, "p%ld", pid);
            s++;
        } else
            piece[0] = *s, piece[1] = '\0';
        size_t n = strlen(piece);
        if (o + n >= cap)
            return -1;
        memcpy(out + o, piece, n);
        o += n;
        if (!*s) {
            o -= forked_copy() ? 0 : n;
            break;
        }
    }
    out[o] = '\0';
    return 0;
}

struct shimgen_out *shimgen_open_output(const char *pattern, const char *what, int *too_long)
{
    char path[PATH_MAX];
    *too_long = trace_path(pattern, path, sizeof path) != 0;
    if (*too_long) {
        shimgen_say("shimgen: not writing the %s: its name, with %%p, %%r or .<pid> added, is "
                    "longer than the %d bytes a path may have\n", what, PATH_MAX - 1);
        return NULL;
    }
    if (getuid() != geteuid() || getgid() != getegid()) {
        shimgen_say("shimgen: not writing %s %s: set-user-ID or set-group-ID process\n", what,
                    path);
        return NULL;
    }
    return shimgen_out_open(path, !shimgen_shared_name(pattern) ? OUT_NAMED
                                  : forked_copy() ? OUT_DERIVED : OUT_SHARED, what);
}
