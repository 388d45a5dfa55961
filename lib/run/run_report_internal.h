/* run/run_report_internal.h -- libmoerun's output layer: the report of a finished run
 * (run_report.c) and the calibration sweep (run_calib.c). Uses the state layer only; used by
 * the entry points (run_api.c). */
#ifndef MOE_RUN_REPORT_INTERNAL_H
#define MOE_RUN_REPORT_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include "run_internal.h"

int run_report(run_t *r, FILE *fp, double check_err, int check_ok);
int run_report_json(run_t *r, const char *path, double check_err, int check_ok, char *errbuf,
                    size_t errlen);
/* Sweep message sizes, measure the FFN rate, write a moe-topology(5) file (rank 0). Returns 0
 * or 1 with a reason. */
int run_calibrate(run_t *r, const char *out, char *errbuf, size_t errlen);

#endif
