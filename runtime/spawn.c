/* spawn.c — tuning now (HEED_MEASURE): finding the heed CLI, the budget,
 * and `heed tune` run as a child process with its output in a log, whose last
 * line is the reason when it fails. */
#define _GNU_SOURCE
#include "hrt.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static double g_budget = -1;        /* heed_set_tune_budget, seconds; < 0: not set */

static int is_exe(const char *path) { return path && *path && access(path, X_OK) == 0; }

/* The heed CLI: $HEED_BIN, else bin/heed beside the library's lib/, else the
 * install prefix this library was built for, else the source tree it was
 * built in. */
static int find_cli(char *buf, size_t n)
{
    const char *env = hrt_getenv("HEED_BIN");
    if (env && *env) return snprintf(buf, n, "%s", env) < (int)n ? 0 : -1;
    Dl_info info;
    if (dladdr((void *)heed_plan_create, &info) && info.dli_fname) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = '\0';
            if (snprintf(buf, n, "%s/../bin/heed", dir) < (int)n && is_exe(buf)) return 0;
        }
    }
    if (is_exe(hrt_install_bin)) return snprintf(buf, n, "%s", hrt_install_bin) < (int)n ? 0 : -1;
    if (snprintf(buf, n, "%s/heed", hrt_source_root) < (int)n && is_exe(buf)) return 0;
    return -1;
}

double hrt_tune_budget(void)
{
    if (g_budget >= 0) return g_budget;
    const char *env = hrt_getenv("HEED_TUNE_BUDGET");
    double b = env ? strtod(env, NULL) : 0;
    return b > 0 && isfinite(b) ? b : 30.0;
}

void heed_set_tune_budget(double seconds)
{
    pthread_mutex_lock(&hrt_state_lock);
    g_budget = seconds > 0 && isfinite(seconds) ? seconds : -1;
    pthread_mutex_unlock(&hrt_state_lock);
}

/* The spec goes into a temporary directory beside the tuner's log and output;
 * HEED_CACHE in the child's environment is replaced by cache. */
int hrt_run_tuner(const char *spec_text, const char *hash, const char *cache, double budget, int threads,
                  char *why, size_t n)
{
    char cli[PATH_MAX];
    if (find_cli(cli, sizeof cli) != 0) {
        hrt_say(why, n, "cannot find the heed CLI (set HEED_BIN)");
        return HEED_ETUNE;
    }
    if (hrt_mkdir_p(cache) != 0) {
        hrt_say(why, n, "cannot create the cache directory %s: %s", cache, strerror(errno));
        return HEED_ETUNE;
    }
    /* never into a cache the loader refuses: what the tuner built there would
     * not be loaded, and what others planted there must not be run */
    char cwhy[HRT_MSG];
    if (hrt_cache_check(cache, cwhy, sizeof cwhy) != HEED_OK) {
        hrt_say(why, n, "not tuning: %s (the loader refuses it: chmod 700, or set HEED_CACHE to a directory "
                "of yours)", cwhy);
        return HEED_ETUNE;
    }
    const char *tmpenv = hrt_getenv("TMPDIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/heed-measure.XXXXXX", tmpenv && *tmpenv ? tmpenv : "/tmp");
    if (!mkdtemp(dir)) {
        hrt_say(why, n, "cannot create a temporary directory: %s", strerror(errno));
        return HEED_ETUNE;
    }
    char name[32], spec[PATH_MAX], log[PATH_MAX], outdir[PATH_MAX], wisdom[PATH_MAX];
    int rc = HEED_ETUNE;
    if (snprintf(name, sizeof name, "tuned_%s", hash) >= (int)sizeof name
        || snprintf(spec, sizeof spec, "%s/%s.lua", dir, name) >= (int)sizeof spec
        || snprintf(log, sizeof log, "%s/tune.log", dir) >= (int)sizeof log
        || snprintf(outdir, sizeof outdir, "%s/out", dir) >= (int)sizeof outdir
        || snprintf(wisdom, sizeof wisdom, "%s/wisdom", cache) >= (int)sizeof wisdom) {
        hrt_say(why, n, "path too long under %s", dir);
        goto done;
    }
    FILE *f = fopen(spec, "we");
    const size_t len = strlen(spec_text);
    if (!f || fwrite(spec_text, 1, len, f) != len) {
        if (f) fclose(f);
        hrt_say(why, n, "cannot write %s", spec);
        goto done;
    }
    fclose(f);

    char budget_s[32], threads_s[16], cache_env[PATH_MAX + 16];
    snprintf(budget_s, sizeof budget_s, "%g", budget);
    snprintf(threads_s, sizeof threads_s, "%d", threads);
    snprintf(cache_env, sizeof cache_env, "HEED_CACHE=%s", cache);
    char *argv[] = { cli, "tune", spec, "--budget", budget_s, "--threads", threads_s, "--wisdom", wisdom,
                     "-o", outdir, NULL };
    size_t ne = 0;
    while (environ && environ[ne]) ne++;
    char **envp = malloc((ne + 2) * sizeof *envp);
    if (!envp) {
        hrt_say(why, n, "out of memory");
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "HEED_CACHE=", 11) != 0) envp[k++] = environ[i];
    envp[k++] = cache_env;
    envp[k] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int err = posix_spawn(&pid, cli, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (err != 0) {
        hrt_say(why, n, "cannot run %s: %s", cli, strerror(err));
        goto done;
    }
    int wst = 0;
    pid_t w;
    while ((w = waitpid(pid, &wst, 0)) < 0 && errno == EINTR) {
    }
    if (w < 0) {
        /* SIGCHLD ignored by the host: judge by the wisdom it left */
        rc = HEED_OK;
        goto done;
    }
    if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0) {
        rc = HEED_OK;
        goto done;
    }
    /* the last line of the log says why */
    char last[256] = "", line[256];
    FILE *lf = fopen(log, "re");
    while (lf && fgets(line, sizeof line, lf))
        if (line[0] != '\n') snprintf(last, sizeof last, "%s", line);
    if (lf) fclose(lf);
    last[strcspn(last, "\n")] = '\0';
    if (WIFEXITED(wst))
        hrt_say(why, n, "%s tune exited with status %d%s%s", cli, WEXITSTATUS(wst), *last ? ": " : "", last);
    else
        hrt_say(why, n, "%s tune was killed by signal %d", cli, WIFSIGNALED(wst) ? WTERMSIG(wst) : 0);
done:
    hrt_rmtree(dir);
    return rc;
}
