/* Unit test of the init-site writer, runtime/gates/gates_init.c, compiled with it and a build's
 * generated headers (tests/runtime/test_guards.py). The "driver" is this program itself: its code
 * bytes at `unit_site` (in .text, so in its r-x segment) stand for an init site, and a
 * plan made here says which bytes shimgen_gates_patch_init is to change. One case a run:
 *   write     gate 0 sets site+1 and site+2, gate 1 (masked) changes site+3: all written
 *   differs   site+1 as recorded, site+2 recorded as 0x41 but holding 0x40: nothing written
 *   rollback  gate 0 sets site+1 and site+2, gate 1's byte lies outside every segment of
 *             this program (an anonymous page): the store fails, the first two are put back
 *   restore   gate 0 sets site+1 and site+2; the protection cannot be put back after the
 *             second store (mprotect, defined here, fails once): both bytes are put back
 *   toomany   9 gates of 8 bytes each, more than one selection may change: nothing written
 *   partial   gate 0 sets site+1, gate 1 (set) has no init site: gate 0 written alone
 *   all       the same, every gate asked at its init site (=init-all): nothing written
 * Prints "rc R", "why TEXT", "bytes B1 B2 B3 B4 OUTSIDE" (hex), "at_init A0 A1" and "prot
 * PERMS" (the protection of the page that holds the site, from /proc/self/maps). */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/base.h"
#include "gates/gates.h"

__asm__(".pushsection .text\n"
        ".globl unit_site\n"
        ".hidden unit_site\n"
        "unit_site: .byte 0x8b, 0xca, 0x40, 0x90, 0x90, 0x90, 0x90, 0x90\n"
        ".popsection\n");
extern const unsigned char unit_site[];

#define NGATES 9
static struct gate gates[NGATES] = {{.name = "first"}, {.name = "second"}};
static int selection[NGATES];
static unsigned char at_init[NGATES];
const struct gate_plan shimgen_gate_plan = {
    .build_id = "00", .driver_version = "unit", .gates = gates, .ngates = NGATES,
    .selection = selection, .at_init = at_init};

/* The writer's mprotect (this definition is the one gates/gates_init.c calls): the n-th call that
 * puts a protection without PROT_WRITE back fails, once, when fail_restore is n. */
static int fail_restore;
int mprotect(void *addr, size_t len, int prot)
{
    if (!(prot & PROT_WRITE) && fail_restore && --fail_restore == 0) {
        errno = EACCES;
        return -1;
    }
    return (int)syscall(SYS_mprotect, addr, len, prot);
}

static int object_base(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t at = (uintptr_t)unit_site;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && at >= info->dlpi_addr + ph->p_vaddr &&
            at < info->dlpi_addr + ph->p_vaddr + ph->p_memsz) {
            *(uintptr_t *)data = info->dlpi_addr;
            return 1;
        }
    }
    return 0;
}

static void page_prot(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi)
            printf("prot %s\n", perms);
    }
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    uintptr_t base = 0;
    if (!dl_iterate_phdr(object_base, &base))
        return 3;
    unsigned char *outside = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (outside == MAP_FAILED)
        return 3;
    outside[0] = 0x11;
    uintptr_t site = (uintptr_t)unit_site - base;
    if (strcmp(argv[1], "write") == 0) {
        gates[0].nset = 2;
        gates[0].set[0] = (struct gate_patch){site + 1, 0xca, 0xcb};
        gates[0].set[1] = (struct gate_patch){site + 2, 0x40, 0x60};
        gates[1].nmask = 1;
        gates[1].mask[0] = (struct gate_patch){site + 3, 0x90, 0x91};
        selection[0] = 1;
        selection[1] = -1;
    } else if (strcmp(argv[1], "differs") == 0) {
        gates[0].nset = 2;
        gates[0].set[0] = (struct gate_patch){site + 1, 0xca, 0xcb};
        gates[0].set[1] = (struct gate_patch){site + 2, 0x41, 0x60};
        selection[0] = 1;
    } else if (strcmp(argv[1], "rollback") == 0) {
        gates[0].nset = 2;
        gates[0].set[0] = (struct gate_patch){site + 1, 0xca, 0xcb};
        gates[0].set[1] = (struct gate_patch){site + 2, 0x40, 0x60};
        gates[1].nset = 1;
        gates[1].set[0] = (struct gate_patch){(uintptr_t)outside - base, 0x11, 0x22};
        selection[0] = 1;
        selection[1] = 1;
    } else if (strcmp(argv[1], "restore") == 0) {
        gates[0].nset = 2;
        gates[0].set[0] = (struct gate_patch){site + 1, 0xca, 0xcb};
        gates[0].set[1] = (struct gate_patch){site + 2, 0x40, 0x60};
        selection[0] = 1;
        fail_restore = 2;
    } else if (strcmp(argv[1], "toomany") == 0) {
        for (unsigned g = 0; g < NGATES; g++) {
            gates[g].nset = GATE_MAX_PATCHES;
            for (unsigned k = 0; k < GATE_MAX_PATCHES; k++)
                gates[g].set[k] = (struct gate_patch){site + 1, 0xca, 0xcb};
            selection[g] = 1;
        }
    } else if (strcmp(argv[1], "partial") == 0 || strcmp(argv[1], "all") == 0) {
        gates[0].nset = 1;
        gates[0].set[0] = (struct gate_patch){site + 1, 0xca, 0xcb};
        selection[0] = 1;
        selection[1] = 1;
    } else {
        return 2;
    }
    char why[256] = "";
    int rc = shimgen_gates_patch_init(base, strcmp(argv[1], "partial") != 0, why, sizeof why);
    printf("rc %d\nwhy %s\n", rc, why);
    printf("at_init %u %u\n", at_init[0], at_init[1]);
    printf("bytes %02x %02x %02x %02x %02x\n", unit_site[0], unit_site[1], unit_site[2],
           unit_site[3], outside[0]);
    page_prot((uintptr_t)unit_site);
    return 0;
}
