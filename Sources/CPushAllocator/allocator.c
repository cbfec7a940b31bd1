#include "CPushAllocator.h"

#include <stdlib.h>  // defines __GLIBC__ on glibc

#if defined(__GLIBC__)
#include <malloc.h>

int pushworker_set_malloc_top_pad(int bytes) { return mallopt(M_TOP_PAD, bytes); }
#else
int pushworker_set_malloc_top_pad(int bytes) { (void)bytes; return 0; }
#endif
