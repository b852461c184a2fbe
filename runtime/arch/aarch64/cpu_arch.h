/*
 * cpu_arch.h (AArch64): arch/cpu.h's instructions. The tick counter is the virtual counter
 * cntvct_el0, read after an isb, so that it is not read ahead of what comes before it.
 */
#ifndef SHIMGEN_CPU_ARCH_H
#define SHIMGEN_CPU_ARCH_H

static inline uint64_t shimgen_ticks(void)
{
    uint64_t t;
    __asm__ __volatile__("isb\n\tmrs %0, cntvct_el0" : "=r"(t)::"memory");
    return t;
}

static inline void shimgen_pause(void)
{
    __asm__ volatile("yield");
}

#endif
