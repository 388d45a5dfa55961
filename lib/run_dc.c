#include "config.h"
#include "run_internal.h"
void run_dc_iter(run_t *r) { run_die(r, "datacentric", -7); }
