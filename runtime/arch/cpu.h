/*
 * cpu.h: the few instructions the C runtime needs of the CPU, one definition per
 * architecture in its folder's cpu_arch.h (arch/<arch>/, on the compiler's include path):
 *   uint64_t shimgen_ticks(void)  the tick counter the timing stubs read too
 *   void shimgen_pause(void)      a spinning thread's pause
 * Both static inline; shared C includes this header, never cpu_arch.h itself.
 */
#ifndef SHIMGEN_CPU_H
#define SHIMGEN_CPU_H

#include <stdint.h>

#include "cpu_arch.h"

#endif
