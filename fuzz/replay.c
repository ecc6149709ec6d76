/* replay.c — runs fuzz targets without libFuzzer: every file named on the
 * command line (or in a directory named there) is passed once to
 * LLVMFuzzerTestOneInput. Built with gcc -fsanitize=address,undefined for
 * `make test-fuzz-regress`; a target that aborts fails the run, and so does
 * one input that runs longer than $FUZZ_REPLAY_TIMEOUT seconds (default 20:
 * the regression inputs of slow parsers take milliseconds once fixed). */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static const char *current;

/* A target that aborts (or a sanitizer, with abort_on_error=1) names the input. */
static void on_abort(int sig)
{
    (void)sig;
    if (current) {
        static const char msg[] = "replay: FAILED on input ";
        (void)!write(2, msg, sizeof msg - 1);
        (void)!write(2, current, strlen(current));
        (void)!write(2, "\n", 1);
    }
    signal(SIGABRT, SIG_DFL);
    raise(SIGABRT);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "replay: an input ran longer than FUZZ_REPLAY_TIMEOUT\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
}

static unsigned timeout_s = 20;

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) return -1;
    /* an exact-size copy, so ASan sees reads past the end */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) return -1;
    memcpy(exact, buf, n);
    free(buf);
    current = path;
    alarm(timeout_s);
    LLVMFuzzerTestOneInput(exact, n);
    alarm(0);
    current = NULL;
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int main(int argc, char **argv)
{
    signal(SIGABRT, on_abort);
    signal(SIGALRM, on_alarm);
    const char *t = getenv("FUZZ_REPLAY_TIMEOUT");
    if (t && atoi(t) > 0) timeout_s = (unsigned)atoi(t);
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0) return 1;
            files++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, by_name);
        if (n < 0) {
            perror(argv[i]);
            return 1;
        }
        for (int j = 0; j < n; j++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[j]->d_name);
            if (names[j]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path) != 0) return 1;
                files++;
            }
            free(names[j]);
        }
        free(names);
    }
    printf("replay %s: %d inputs, no failure\n", argv[0], files);
    return 0;
}
