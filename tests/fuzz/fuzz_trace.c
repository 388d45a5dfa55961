/* tests/fuzz/fuzz_trace.c -- libFuzzer target: the trace reader (binary container, binary
 * records, text view; the format is detected from content) and the text writer. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "moe/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    if (fuzz_path(data, size, path, sizeof path) != 0)
        return 0;
    /* Alternate single-threaded and threaded reading on the first input byte. */
    int threads = size && (data[0] & 1) ? 1 : 0;
    moe_trace_t *t = moe_trace_open(path, "r", threads, NULL, NULL, 0);
    if (!t)
        return 0;
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    if (moe_trace_read_header(t, &h) == 0) {
        FILE *sink = fopen("/dev/null", "w");
        moe_trace_rec_t r = {0};
        moe_trace_hdr_print(sink, &h);
        for (int n = 0; n < 100000 && moe_trace_read(t, &r) == 1; n++)
            moe_trace_rec_print(sink, &h, &r);
        moe_trace_rec_release(&r);
        fclose(sink);
    }
    moe_trace_hdr_release(&h);
    moe_trace_close(t, NULL, 0);
    return 0;
}
