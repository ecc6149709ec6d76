/* emu_exec.c — keeps a Criterion suite under qemu-user. Criterion runs each
 * test by re-executing its own program (execve of /proc/self/exe), and
 * qemu-user runs an execve'd program natively unless binfmt_misc sends it
 * back to qemu: the tests would then run on the host CPU. Preloaded into the
 * emulated program (QEMU_SET_ENV=LD_PRELOAD=this.so), this execve sends a
 * re-execution of the running program to $HEED_QEMU instead, with the same
 * environment less LD_PRELOAD (the new qemu sets it again for its guest, and
 * reads the CPU model from QEMU_CPU). Any other program is executed as asked.
 * Build: cc -shared -fPIC emu_exec.c -o emu_exec.so -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

/* The running program's path, or "" (qemu answers for /proc/self/exe with the guest program). */
static void self_path(char out[PATH_MAX])
{
    ssize_t n = readlink("/proc/self/exe", out, PATH_MAX - 1);
    out[n > 0 ? n : 0] = '\0';
}

int execve(const char *path, char *const argv[], char *const envp[])
{
    execve_fn real = (execve_fn)dlsym(RTLD_NEXT, "execve");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    const char *qemu = getenv("HEED_QEMU");
    char self[PATH_MAX], target[PATH_MAX];
    self_path(self);
    if (!qemu || !*qemu || !self[0]) return real(path, argv, envp);
    if (!strcmp(path, "/proc/self/exe"))
        snprintf(target, sizeof target, "%s", self);
    else if (!realpath(path, target))
        return real(path, argv, envp);
    if (strcmp(target, self)) return real(path, argv, envp);

    size_t na = 0, ne = 0;
    while (argv[na]) na++;
    while (envp[ne]) ne++;
    /* qemu -0 ARGV0 PROGRAM ARGS... */
    char **args = calloc(na + 5, sizeof *args), **env = calloc(ne + 1, sizeof *env);
    if (!args || !env) {
        free(args);
        free(env);
        errno = ENOMEM;
        return -1;
    }
    size_t a = 0, e = 0;
    args[a++] = (char *)qemu;
    args[a++] = "-0";
    args[a++] = na ? argv[0] : target;
    args[a++] = target;
    for (size_t i = 1; i < na; i++) args[a++] = argv[i];
    for (size_t i = 0; i < ne; i++)
        if (strncmp(envp[i], "LD_PRELOAD=", 11)) env[e++] = envp[i];
    int rc = real(qemu, args, env);
    int saved = errno;
    free(args);
    free(env);
    errno = saved;
    return rc;
}
