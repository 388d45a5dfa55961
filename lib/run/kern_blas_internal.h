/* run/kern_blas_internal.h -- the CPU backend's expert FFN, forward and backward, through a
 * CBLAS (cblas_sgemm; configure --with-blas). The same model as moe_kern_ffn_grouped_act and
 * moe_kern_ffn_backward_scaled (moe/kern.h), which stay the reference: sums in the BLAS's
 * order, so equal to them to fp32 rounding, not bit for bit. Private to libmoerun; built only
 * with HAVE_CBLAS (Makefile.am). */
#ifndef MOE_KERN_BLAS_INTERNAL_H
#define MOE_KERN_BLAS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Rows per GEMM: large enough for the BLAS's blocking to reach its speed, small enough that
 * the scratch (kern_blas_work_size) stays a few MB at H 1024, F 2048. */
#define KERN_BLAS_ROWS 256

/* One thread per rank for the BLAS: moe-run runs a rank per core, and a BLAS's own pool
 * would oversubscribe them (openblas_set_num_threads / bli_thread_set_num_threads). */
void kern_blas_init(void);

/* With OpenBLAS: a one-line warning into buf when the core whose kernels it picked
 * (openblas_get_corename) uses narrower vectors than this CPU has (say "Prescott", SSE3, on
 * an AVX-512 Xeon: a quarter of the speed), naming the OPENBLAS_CORETYPE that fixes it;
 * NULL when there is nothing to say or the build cannot tell. */
const char *kern_blas_core_warning(char *buf, size_t n);

/* Floats of scratch both functions below need for sizes H and F, either expert kind. */
size_t kern_blas_work_size(uint32_t H, uint32_t F);

/* moe_kern_ffn_grouped_act through cblas_sgemm; work: kern_blas_work_size(H, F) floats.
 * Returns 0 or MOE_EINVAL as the reference does. */
int kern_blas_ffn_grouped_act(const float *x, uint32_t G, const size_t *off, uint32_t H,
                              uint32_t F, int expert, const float *const *W1,
                              const float *const *W2, float *y, float *act, float *work);

/* moe_kern_ffn_backward_scaled through cblas_sgemm (the same arguments; work as above, not
 * NULL). */
int kern_blas_ffn_backward_scaled(const float *x, const float *a_in, size_t n, uint32_t H,
                                  uint32_t F, int expert, const float *W1, const float *W2,
                                  const float *dy, const float *sc, float *dx, float *dW1,
                                  float *dW2, float *ds, float *work);

#endif
