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

/* dlopen the first moerun-NAME.so on the search path. NULL with why empty when there is none,
 * or with path and why set for the first one that exists but does not load. */
static void *open_module(const char *name, char *path, size_t pathlen, char *why, size_t wlen)
{
    const char *env = getenv("MOE_RUN_MODULE_PATH");
    char dirs[4096], try[4200];
    snprintf(dirs, sizeof dirs, "%s%s%s", env && *env ? env : "", env && *env ? ":" : "",
             MOE_RUN_MODULE_DIR);
    why[0] = 0;
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(try, sizeof try, "%s/moerun-%s.so", d, name);
        /* RTLD_LOCAL: the module's CUDA libraries stay out of the global namespace. */
        void *h = dlopen(try, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(path, pathlen, "%s", try);
            return h;
        }
        const char *e = dlerror();
        /* a module that exists but cannot load says why (dlerror: "PATH: reason", or a
         * library the module needs); a missing one is not worth a word */
        if (!why[0] && e && !strstr(e, "No such file")) {
            size_t n = strlen(try);
            if (strncmp(e, try, n) == 0 && e[n] == ':')
                e += n + 1 + (e[n + 1] == ' ');
            snprintf(path, pathlen, "%s", try);
            snprintf(why, wlen, "%s", e);
        }
    }
    return NULL;
}

typedef moe_run_backend_t *(*make_fn)(moe_run_comm_t *, int, int, char *, size_t);

/* The module opened last (a run uses one backend): its name and entry point. */
static struct {
    char name[64];
    make_fn make;
} opened;

int moe_run_backend_module_open(const char *name, char *errbuf, size_t errlen)
{
    if (opened.make && strcmp(opened.name, name) == 0)
        return 0;
    if (strlen(name) >= sizeof opened.name)
        return util_errf(errbuf, errlen, MOE_EINVAL, "backend name too long: '%s'", name);
    char path[4200], why[512];
    void *h = open_module(name, path, sizeof path, why, sizeof why);
    if (!h && why[0])
        return util_errf(errbuf, errlen, MOE_EINVAL, "backend %s: cannot load '%s': %s", name,
                         path, why);
    if (!h)
        return util_errf(errbuf, errlen, MOE_EINVAL, "backend %s: no moerun-%s.so in "
                         "MOE_RUN_MODULE_PATH or %s", name, name, MOE_RUN_MODULE_DIR);
    /* The module is built with this very libmoerun: a module of another version would read
     * the backend structures differently. */
    const char *const *version = (const char *const *)dlsym(h, "moe_run_module_version");
    make_fn make;
    *(void **)&make = dlsym(h, "moe_run_module_backend");
    int st = 0;
    if (!version || !make)
        st = util_errf(errbuf, errlen, MOE_EVERSION, "backend %s: '%s' is not a moe-run "
                       "backend module", name, path);
    else if (strcmp(*version, PACKAGE_VERSION) != 0)
        st = util_errf(errbuf, errlen, MOE_EVERSION, "backend %s: '%s' is from moeflow %s, "
                       "this is %s", name, path, *version, PACKAGE_VERSION);
    if (st) {
        dlclose(h);
        return st;
    }
    /* The module stays loaded for the life of the process: the backend's operations live in
     * it, and CUDA libraries do not take kindly to being unloaded. */
    snprintf(opened.name, sizeof opened.name, "%s", name);
    opened.make = make;
    return 0;
}

moe_run_backend_t *moe_run_backend_module(const char *name, moe_run_comm_t *c, int dtype,
                                          int transport, char *errbuf, size_t errlen)
{
    if (moe_run_backend_module_open(name, errbuf, errlen))
        return NULL;
    return opened.make(c, dtype, transport, errbuf, errlen);
}
