#ifndef CPUSHALLOCATOR_H
#define CPUSHALLOCATOR_H

/// Sets glibc's M_TOP_PAD (see AllocatorSettings.swift). Returns 1 when set, 0 when refused or not glibc.
int pushworker_set_malloc_top_pad(int bytes);

#endif
