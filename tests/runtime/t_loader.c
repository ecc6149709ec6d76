/* t_loader.c — loader.c, cache.c: tuned shared objects, and every way one is
 * refused. */
#include "rt_common.h"

/* ---- tuned shared objects ------------------------------------------------------------ */

Test(tuned, loads_and_matches_reference)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    add_record(cache, "rt_general", (rec_opts){ 0 });
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(st.fallback, 0);
    cr_expect(strstr(st.message, "rt_causal-00000001.so"), "%s", st.message);
    for (int b = 0; b < 3; b++) expect_matches_reference(pl, b, 7, 1.0f);
    heed_plan_destroy(pl);
    /* with run-time weights */
    p = prob_general();
    pl = plan_ok(&p, 0, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(pl, 3, 1, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}

/* Two plans share one loaded object; after both are gone and heed_cleanup
 * unloads it, planning loads it again. */
Test(tuned, shared_and_reloaded)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *a = plan_ok(&p, 0, &st), *b = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(a), HEED_SOURCE_TUNED);
    cr_expect_eq(heed_plan_source(b), HEED_SOURCE_TUNED);
    heed_plan_destroy(a);
    expect_matches_reference(b, 1, 2, 1.0f);
    heed_cleanup(); /* b still holds the object */
    expect_matches_reference(b, 1, 2, 1.0f);
    heed_plan_destroy(b);
    a = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(a), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(a, 1, 2, 1.0f);
    heed_plan_destroy(a);
    rm_cache();
}

Test(tuned, missing_object)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1 });
    expect_fallback(HEED_ESOMISSING, "No such file");
    rm_cache();
}

Test(tuned, corrupt_object)
{
    /* garbage bytes, with the record naming their SHA-256: dlopen refuses */
    const char *cache = new_cache();
    char path[512], sha[65];
    snprintf(path, sizeof path, "%s/bad-00000001.so", cache);
    const char *junk = "\177ELF this is not a shared object";
    spit(path, junk);
    heed_sha256_hex(junk, strlen(junk), sha);
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1, .so_name = "bad-00000001.so", .sha = sha });
    expect_fallback(HEED_ESOLOAD, "dlopen");
    rm_cache();
}

/* cache/so_name: a shared object compiled from the C text source (with
 * runtime/ on the include path), mode 0755; its SHA-256 in sha. */
static void build_object(const char *cache, const char *so_name, const char *source, char sha[80])
{
    char src[600], so[512], cmd[4096];
    snprintf(src, sizeof src, "%s/x.c", cache);
    snprintf(so, sizeof so, "%s/%s", cache, so_name);
    spit(src, source);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -I'%s/runtime' '%s' -o '%s' && sha256sum '%s' | cut -c1-64 > '%s.sha'",
             HEED_ROOT, src, so, so, so);
    cr_assert_eq(system(cmd), 0);
    snprintf(src, sizeof src, "%s.sha", so);
    char *t = slurp(src, NULL);
    snprintf(sha, 80, "%.64s", t);
    free(t);
    chmod(so, 0755);
}

Test(tuned, not_a_table)
{
    /* a real shared object (libc's crypt would do; use a fixture-less one): no heed_kernel_table */
    const char *cache = new_cache();
    char sha[80];
    build_object(cache, "notable-00000001.so", "int heed_something_else(void) { return 1; }\n", sha);
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1, .so_name = "notable-00000001.so", .sha = sha });
    expect_fallback(HEED_ESOLOAD, "heed_kernel_table");
    rm_cache();
}

/* A kernel table for rt_causal's problem built for another layout (marker
 * line: its heed_kernel_table_abi, or none as before the marker): the loader
 * refuses it (HEED_ESOABI) rather than read its entries with this heed's
 * heed_problem. Without the check it would be taken (its problem matches)
 * and its stub kernel run. */
static void expect_layout_refused(const char *marker)
{
    const char *cache = new_cache();
    const heed_problem p = prob_causal();
    char source[2048], sha[80];
    snprintf(source, sizeof source,
             "#include \"kernel_table.h\"\n"
             "static int stub(int b, const float *q, const float *k, const float *v, float *o, const heed_params *w)\n"
             "{ (void)b; (void)q; (void)k; (void)v; (void)o; (void)w; return 0; }\n"
             "const heed_kernel_entry heed_kernel_table[] = { { \"rt_old\", \"bq=32,bk=128\", \"stub\",\n"
             "  { .heads = %d, .lq = %d, .lk = %d, .dk = %d, .dv = %d, .score = %d, .norm = %d, .fuse = %d, .mask = %d,\n"
             "    .scale = %.17g }, stub } };\n"
             "const int heed_kernel_count = 1;\n%s\n",
             p.heads, p.lq, p.lk, p.dk, p.dv, (int)p.score, (int)p.norm, (int)p.fuse, (int)p.mask, p.scale, marker);
    build_object(cache, "old-00000001.so", source, sha);
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1, .so_name = "old-00000001.so", .sha = sha });
    expect_fallback(HEED_ESOABI, "heed_kernel_table_abi");
    rm_cache();
}

Test(tuned, older_table_layout_no_marker) { expect_layout_refused(""); }

Test(tuned, other_table_layout)
{
    expect_layout_refused("const int heed_kernel_table_abi = HEED_TABLE_ABI - 1;");
}

Test(tuned, wrong_hash)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal",
               (rec_opts){ .sha = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff" });
    expect_fallback(HEED_ESOHASH, "SHA-256");
    rm_cache();
}

Test(tuned, modified_after_tuning)
{
    /* the right record, then one byte of the object changes */
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char path[512];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    fseek(f, 1000, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 1000, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    expect_fallback(HEED_ESOHASH, "SHA-256");
    rm_cache();
}

/* rt_causal's tuned object with mode `mode`: refused as unsafe. */
static void expect_mode_refused(mode_t mode)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char path[512];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    cr_assert_eq(chmod(path, mode), 0);
    expect_fallback(HEED_ESOUNSAFE, "writable by group or others");
    rm_cache();
}

Test(tuned, group_writable_object) { expect_mode_refused(0664); }

Test(tuned, world_writable_object) { expect_mode_refused(0646); }

Test(tuned, writable_directory)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    chmod(cache, 0777 | S_ISVTX);
    expect_fallback(HEED_ESOUNSAFE, "cache directory");
    chmod(cache, 0700);
    rm_cache();
}

Test(tuned, other_owner)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char path[512];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    if (geteuid() != 0) cr_skip_test("chown to another user needs root");
    cr_assert_eq(chown(path, 4242, 4242), 0);
    expect_fallback(HEED_ESOUNSAFE, "owned by another user");
    rm_cache();
}

/* The object loaded is the file its checks read (issue 41 item 19): a
 * valid object of another kernel renamed over the path after the checks (the
 * loader's test hook) is not what dlopen loads, and the loaded object's name
 * is /proc/self/fd/N. */
static char g_swap_from[1024];
static void swap_object(const char *path)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.swap", path);
    copy_file(g_swap_from, tmp);
    cr_assert_eq(rename(tmp, path), 0, "rename: %s", strerror(errno));
}

static int proc_fd_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    return info->dlpi_name && !strncmp(info->dlpi_name, "/proc/self/fd/", 14);
}

Test(tuned, loads_the_bytes_checked)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    snprintf(g_swap_from, sizeof g_swap_from, "%s/rt_other.so", RT_FIXTURES);
    hrt_so_checked_hook = swap_object;
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    hrt_so_checked_hook = NULL;
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(dl_iterate_phdr(proc_fd_object, NULL), "no object loaded as /proc/self/fd/N");
    expect_matches_reference(pl, 2, 3, 1.0f);
    heed_plan_destroy(pl);
    /* unloaded, the next load takes the file now at the path: rt_other, no kernel for this problem */
    heed_cleanup();
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* A setuid program reads none of libheed's environment variables
 * (secure_getenv; issue 41 item 19): linked with libheed.a, setuid to
 * nobody and run by root with HEED_CACHE, HOME, HEED_SYSTEM_WISDOM and
 * HEED_TUNE_BUDGET set, it sees nobody's cache and the built-in defaults. */
Test(tuned, setuid_ignores_the_environment, .timeout = 120)
{
    if (geteuid() != 0) cr_skip_test("a program setuid to another user needs root");
    const struct passwd *pw = getpwnam("nobody");
    if (!pw) cr_skip_test("no user nobody");
    const char *dir = new_cache();
    char src[512], prog[512], cmd[4096], out[2048];
    snprintf(src, sizeof src, "%s/prog.c", dir);
    snprintf(prog, sizeof prog, "%s/prog", dir);
    spit(src, "#include <stdio.h>\n#include <stddef.h>\n#include <unistd.h>\n"
              "int hrt_cache_dir(char *buf, size_t n);\nconst char *hrt_system_wisdom_path(void);\n"
              "double hrt_tune_budget(void);\n"
              "int main(void)\n{\n    char c[4096];\n    const char *w = hrt_system_wisdom_path();\n"
              "    printf(\"%d %d cache=%s wisdom=%s budget=%g\\n\", (int)getuid(), (int)geteuid(),\n"
              "           hrt_cache_dir(c, sizeof c) ? \"(none)\" : c, w ? w : \"(none)\", hrt_tune_budget());\n"
              "    return 0;\n}\n");
    snprintf(cmd, sizeof cmd, "cc -std=c11 '%s' '%s/../libheed.a' -fopenmp -ldl -lpthread -lm -o '%s' 2>&1", src,
             RT_REGISTRY, prog);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    cr_assert_eq(pclose(f), 0, "%s", out);
    cr_assert_eq(chown(prog, pw->pw_uid, pw->pw_gid), 0);
    cr_assert_eq(chmod(prog, 04755), 0);
    snprintf(cmd, sizeof cmd, "HEED_CACHE=/tmp/evil-cache HOME=/tmp/evil-home HEED_SYSTEM_WISDOM=/tmp/evil-wisdom "
             "HEED_TUNE_BUDGET=7 '%s'", prog);
    f = popen(cmd, "r");
    cr_assert(f);
    n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    pclose(f);
    int uid = -1, euid = -1;
    cr_assert_eq(sscanf(out, "%d %d", &uid, &euid), 2, "%s", out);
    if (uid == euid) cr_skip_test("setuid bits are ignored here (a nosuid mount?): %s", out);
    cr_expect(!strstr(out, "evil"), "the caller's environment reached libheed: %s", out);
    cr_expect(strstr(out, "budget=30"), "%s", out);
    rm_cache();
}

Test(tuned, symlink_refused)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1 });
    char path[512], target[512];
    snprintf(target, sizeof target, "%s/rt_causal.so", RT_FIXTURES);
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    cr_assert_eq(symlink(target, path), 0);
    expect_fallback(HEED_ESOUNSAFE, "symbolic link");
    rm_cache();
}

/* The record says rt_causal but the object computes rt_other ("shape mismatch"). */
Test(tuned, object_for_another_problem)
{
    const char *cache = new_cache();
    char hash[64];
    fixture_text("rt_causal", "hash", hash, sizeof hash);
    add_record(cache, "rt_other", (rec_opts){ .spec = hash });
    expect_fallback(HEED_ESOPROBLEM, "computes spec");
    rm_cache();
}

Test(tuned, other_machine_ignored)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .cpu = "Some_Other_CPU" });
    add_record(cache, "rt_general", (rec_opts){ .isa = "sse4_2" });
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, 0);
    cr_expect(strstr(st.message, "none for this CPU"), "%s", st.message);
    heed_plan_destroy(pl);
    p = prob_general();
    cr_expect_null(heed_plan_create(&p, HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ENOWISDOM);
    rm_cache();
}

/* The cpu field tolerates either spelling of whitespace. */
Test(tuned, cpu_names_compare_loosely)
{
    cr_expect(hrt_cpu_same("AMD_EPYC", "AMD EPYC"));
    cr_expect(hrt_cpu_same("Intel(R)_Xeon(R)__CPU_@_2.20GHz", "Intel(R) Xeon(R) CPU @ 2.20GHz"));
    cr_expect(!hrt_cpu_same("AMD_EPYC", "AMD_EPYC_7B13"));
    cr_expect(hrt_cpu()[0] != '\0');
}

/* A record for this thread count wins over a faster one for another count,
 * and a second candidate is tried when the first is refused. */
Test(tuned, candidates_in_order)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .threads = omp_threads() + 1, .so_name = "other-threads.so",
                                               .extra = "\tnote=faster" });
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1 }); /* this thread count, but missing */
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(strstr(st.message, "other-threads.so"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(tuned, imported_wisdom)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/wisdom", cache);
    snprintf(to, sizeof to, "%s/elsewhere", cache);
    cr_assert_eq(rename(from, to), 0);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    cr_expect_eq(heed_wisdom_import(to), 1);
    pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    heed_plan_destroy(pl);
    heed_cleanup(); /* forgets imported wisdom */
    cr_expect_null(heed_plan_create(&p, HEED_WISDOM_ONLY, &st));
    rm_cache();
}
