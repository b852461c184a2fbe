/*
 * cpu_arch.h (x86-64): arch/cpu.h's instructions. The tick counter is the TSC.
 */
#ifndef SHIMGEN_CPU_ARCH_H
#define SHIMGEN_CPU_ARCH_H

static inline uint64_t shimgen_ticks(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static inline void shimgen_pause(void)
{
    __builtin_ia32_pause();
}

#endif
