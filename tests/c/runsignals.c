/* The command that tests/run/test_run.py runs under `shimgen run`: it says how it started (the
 * signals blocked, and whether SIGPIPE, SIGINT, SIGTERM and SIGHUP are at their defaults),
 * then counts every SIGINT, SIGTERM and SIGHUP it receives until SIGUSR1 (or 60 s), and
 * prints the counts each time they change, and once more 200 ms after SIGUSR1 (time for a
 * signal delivered twice to arrive twice). Output lines:
 *   start blocked N pipe D int D term D hup D    (D: 1 default, 0 not)
 *   ready PID
 *   now INT n TERM n HUP n                       (each change)
 *   got INT n TERM n HUP n
 * argv[1], if given: the exit status. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t counts[NSIG], done;

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        done = 1;
    else
        counts[sig]++;
}

static int is_default(int sig)
{
    struct sigaction old;
    return sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_DFL;
}

int main(int argc, char **argv)
{
    sigset_t blocked;
    sigprocmask(SIG_SETMASK, NULL, &blocked);
    int n = 0;
    for (int s = 1; s < NSIG; s++)
        n += sigismember(&blocked, s) == 1;
    printf("start blocked %d pipe %d int %d term %d hup %d\n", n, is_default(SIGPIPE),
           is_default(SIGINT), is_default(SIGTERM), is_default(SIGHUP));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    printf("ready %ld\n", (long)getpid());
    fflush(stdout);
    struct timespec tick = {0, 1000000};
    int seen = 0;
    for (int i = 0; i < 60000 && !done; i++) {
        nanosleep(&tick, NULL);
        int now = counts[SIGINT] + counts[SIGTERM] + counts[SIGHUP];
        if (now != seen) {
            seen = now;
            printf("now INT %d TERM %d HUP %d\n", (int)counts[SIGINT], (int)counts[SIGTERM],
                   (int)counts[SIGHUP]);
            fflush(stdout);
        }
    }
    struct timespec settle = {0, 200000000};
    nanosleep(&settle, NULL);
    printf("got INT %d TERM %d HUP %d\n", (int)counts[SIGINT], (int)counts[SIGTERM],
           (int)counts[SIGHUP]);
    return argc > 1 ? atoi(argv[1]) : 0;
}
