/* gpudl_impl.c — gpudl.h's implementation alone, in its own translation
   unit. The Makefile compiles it once per configuration (plain, ASan+UBSan,
   TSan; -DGPUDL_DOUBLE, -DGPUDL_NVML, MPI; each CPU code path) and links the
   object into every test and example of that configuration, which it
   compiles with -DGPUDL_IMPLEMENTATION_DONE: their own
   `#define GPUDL_IMPLEMENTATION` then gets only the declarations. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
