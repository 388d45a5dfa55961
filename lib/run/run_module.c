/* run/run_module.c -- backends built as loadable modules (moerun-NAME.so): found on
 * MOE_RUN_MODULE_PATH or in the installed module directory, opened only when a run asks for
 * them, so that a CPU run never loads (or needs) the CUDA, cuBLAS and NCCL libraries. */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/run_backend.h"
#include "util_internal.h"

#ifndef MOE_RUN_MODULE_DIR
#define MOE_RUN_MODULE_DIR "/usr/local/lib/moeflow"
#endif

/* dlopen the first moerun-NAME.so on the search path; NULL with the last reason in why. */
static void *open_module(const char *name, char *path, size_t pathlen, char *why, size_t wlen)
{
    const char *env = getenv("MOE_RUN_MODULE_PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s%s%s", env && *env ? env : "", env && *env ? ":" : "",
             MOE_RUN_MODULE_DIR);
    snprintf(why, wlen, "not found");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(path, pathlen, "%s/moerun-%s.so", d, name);
        /* RTLD_LOCAL: the module's CUDA libraries stay out of the global namespace. */
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
        const char *e = dlerror();
        /* a module that exists but cannot load says why; a missing one is not worth a word */
        if (e && !strstr(e, "No such file"))
            snprintf(why, wlen, "%s", e);
    }
    snprintf(path, pathlen, "moerun-%s.so", name);
    return NULL;
}

moe_run_backend_t *moe_run_backend_module(const char *name, moe_run_comm_t *c, int dtype,
                                          char *errbuf, size_t errlen)
{
    char path[4200], why[512];
    void *h = open_module(name, path, sizeof path, why, sizeof why);
    if (!h) {
        util_errf(errbuf, errlen, MOE_EINVAL,
                  "backend %s: cannot load %s (%s; searched MOE_RUN_MODULE_PATH and %s)", name,
                  path, why, MOE_RUN_MODULE_DIR);
        return NULL;
    }
    /* The module is built with this very libmoerun: a module of another version would read
     * the backend structures differently. */
    const char *const *version = (const char *const *)dlsym(h, "moe_run_module_version");
    moe_run_backend_t *(*make)(moe_run_comm_t *, int, char *, size_t);
    *(void **)&make = dlsym(h, "moe_run_module_backend");
    if (!version || !make) {
        util_errf(errbuf, errlen, MOE_EVERSION, "backend %s: %s is not a moe-run backend module", name, path);
        dlclose(h);
        return NULL;
    }
    if (strcmp(*version, PACKAGE_VERSION) != 0) {
        util_errf(errbuf, errlen, MOE_EVERSION, "backend %s: %s is from moeflow %s, this is %s", name, path,
                  *version, PACKAGE_VERSION);
        dlclose(h);
        return NULL;
    }
    /* The module stays loaded for the life of the process: the backend's operations live in
     * it, and CUDA libraries do not take kindly to being unloaded. */
    return make(c, dtype, errbuf, errlen);
}
