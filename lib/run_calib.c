#include "config.h"
#include "run_internal.h"
int run_calibrate(run_t *r, const char *out, char *errbuf, size_t errlen) { (void)r; (void)out; (void)errbuf; (void)errlen; return 1; }
