/* gpudl_impl.c — gpudl's implementation for the fuzz harnesses and the seed
   generator, compiled once (with the fuzzers' instrumentation) and linked
   into each of them. */
#define GPUDL_IMPLEMENTATION
#include "../../gpudl.h"
