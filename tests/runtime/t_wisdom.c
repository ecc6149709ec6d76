/* t_wisdom.c — wisdom.c: wisdom files (import, export, merge, bad lines and
 * files). */
#include "rt_common.h"

/* ---- wisdom files ------------------------------------------------------------------ */

#define REC(spec, cc, reps, med, extra)                                                                        \
    "spec=" spec "\tcpu=Test_CPU\tisa=avx\tcc=" cc "\tthreads=4\tschedule=bq=8\tmedian_ms=" med "\treps=" reps \
    extra "\n"

Test(wisdom, import_export_round_trip)
{
    const char *cache = new_cache();
    char in[512], out[512], lock[600];
    snprintf(in, sizeof in, "%s/in", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    spit(in, "heed-wisdom 1\n" REC("0123456789abcdef", "gcc -O3", "5", "1.5", "\tfuture_key=kept")
                 REC("0123456789abcdef", "clang -O3", "5", "1.2", "") REC("fedcba9876543210", "gcc -O3", "3", "2", ""));
    cr_expect_eq(heed_wisdom_import(in), 3);
    cr_expect_eq(heed_wisdom_export(out), 3);
    char *t = slurp(out, NULL);
    cr_assert(t);
    cr_expect_eq(strncmp(t, "heed-wisdom 1\n", 14), 0);
    cr_expect(strstr(t, "future_key=kept"), "%s", t);
    cr_expect(strstr(t, "cc=clang -O3"), "%s", t);
    free(t);
    snprintf(lock, sizeof lock, "%s.lock", out);
    cr_expect_eq(access(lock, F_OK), 0);
    /* exported wisdom imports again, the same */
    heed_cleanup();
    cr_expect_eq(heed_wisdom_import(out), 3);
    rm_cache();
}

Test(wisdom, merge_rule)
{
    const char *cache = new_cache();
    char a[512], b[512], out[512];
    snprintf(a, sizeof a, "%s/a", cache);
    snprintf(b, sizeof b, "%s/b", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    /* same key: more reps wins whatever the order; equal reps: the lower median */
    spit(a, "heed-wisdom 1\n" REC("1111111111111111", "gcc", "9", "5.0", "\tmark=a9")
                REC("2222222222222222", "gcc", "4", "1.0", "\tmark=a-fast"));
    spit(b, "heed-wisdom 1\n" REC("1111111111111111", "gcc", "3", "0.1", "\tmark=b3")
                REC("2222222222222222", "gcc", "4", "2.0", "\tmark=b-slow"));
    heed_wisdom_import(b);
    heed_wisdom_import(a);
    heed_wisdom_import(b);
    cr_expect_eq(heed_wisdom_export(out), 2);
    char *t = slurp(out, NULL);
    cr_expect(strstr(t, "mark=a9") && strstr(t, "mark=a-fast"), "%s", t);
    cr_expect(!strstr(t, "mark=b3") && !strstr(t, "mark=b-slow"), "%s", t);
    free(t);
    rm_cache();
}

/* The pass is part of the key: a backward record (pass=backward) and the
 * forward's of the same spec, CPU, compiler and threads are both kept; a
 * record without pass (every file written before it existed) and one with
 * pass=forward are the same key. */
Test(wisdom, pass_is_part_of_the_key)
{
    const char *cache = new_cache();
    char a[512], out[512];
    snprintf(a, sizeof a, "%s/a", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    spit(a, "heed-wisdom 1\n" REC("1111111111111111", "gcc", "9", "5.0", "\tmark=old-forward")
                REC("1111111111111111", "gcc", "9", "1.0", "\tpass=backward\tmark=backward")
                REC("1111111111111111", "gcc", "9", "4.0", "\tpass=forward\tmark=new-forward"));
    cr_expect_eq(heed_wisdom_import(a), 3);
    cr_expect_eq(heed_wisdom_export(out), 2);
    char *t = slurp(out, NULL);
    cr_expect(strstr(t, "mark=backward") && strstr(t, "mark=new-forward") && !strstr(t, "mark=old-forward"), "%s", t);
    free(t);
    rm_cache();
}

/* Export merges with what the file holds (another process's records). */
Test(wisdom, export_merges_with_file)
{
    const char *cache = new_cache();
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/in", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    spit(out, "heed-wisdom 1\n" REC("3333333333333333", "gcc", "2", "1", "\tmark=theirs"));
    spit(in, "heed-wisdom 1\n" REC("4444444444444444", "gcc", "2", "1", "\tmark=ours"));
    heed_wisdom_import(in);
    cr_expect_eq(heed_wisdom_export(out), 2);
    char *t = slurp(out, NULL);
    cr_expect(strstr(t, "mark=theirs") && strstr(t, "mark=ours"), "%s", t);
    free(t);
    rm_cache();
}

Test(wisdom, skips_bad_lines_with_warnings)
{
    const char *cache = new_cache();
    char in[512];
    snprintf(in, sizeof in, "%s/in", cache);
    spit(in, "heed-wisdom 1\n"
             REC("5555555555555555", "gcc", "1", "1", "")                           /* 2: good */
             "cpu=x\tisa=\tcc=gcc\tthreads=1\n"                                     /* 3: no spec */
             REC("5555555555555555", "gcc", "1", "fast", "")                        /* 4: bad number */
             "spec=5555555555555555\tcpu=x\tisa=\tcc=gcc\tthreads=0\n"              /* 5: bad threads */
             "spec=5555555555555555\tisa=\tcc=gcc\tthreads=1\n"                     /* 6: no cpu */
             "just some words\n"                                                    /* 7 */
             REC("6666666666666666", "gcc", "1", "1", "\tso=../../etc/passwd")       /* 8: so with a / */
             "spec=ABCDEF0123456789\tcpu=x\tisa=\tcc=gcc\tthreads=1\n"              /* 9: upper-case hex */
             "\n"
             REC("7777777777777777", "gcc", "1", "1", ""));                         /* 11: good */
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    cr_expect_eq(heed_wisdom_import(in), 2);
    for (int line = 3; line <= 9; line++) {
        char want[600];
        snprintf(want, sizeof want, "%s:%d:", in, line);
        cr_expect(strstr(g_warnings, want), "no warning for line %d:\n%s", line, g_warnings);
    }
    cr_expect(!strstr(g_warnings, ":2:") && !strstr(g_warnings, ":11:"), "%s", g_warnings);
    heed_set_warning_handler(NULL, NULL);
    rm_cache();
}

/* 50,000 records and 10,000 better-measured duplicates through
 * heed_wisdom_import and heed_wisdom_export (issue 16, item 11: the import was
 * quadratic, 40k records took 10 s; tests/test_wisdom.c counts the key
 * comparisons). Each key once, the better duplicate kept. */
Test(wisdom, import_of_50k_records)
{
    enum { N = 50000, D = 10000 };
    const char *cache = new_cache();
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/big", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    FILE *f = fopen(in, "w");
    cr_assert(f);
    fputs("heed-wisdom 1\n", f);
    for (int i = 0; i < N + D; i++) {
        int k = i < N ? i : (i - N) * 5;
        fprintf(f, "spec=%016x\tcpu=Other_CPU\tisa=avx\tcc=cc\tthreads=1\tschedule=-\tmedian_ms=1\treps=%d\n", k,
                i < N ? 10 : 20);
    }
    fclose(f);
    cr_expect_eq(heed_wisdom_import(in), N + D);
    cr_expect_eq(heed_wisdom_export(out), N);
    size_t n;
    char *t = slurp(out, &n);
    cr_assert(t);
    int lines = 0, better = 0;
    for (char *p = t; (p = strchr(p, '\n')) != NULL; p++) lines++;
    for (char *p = t; (p = strstr(p, "reps=20")) != NULL; p++) better++;
    cr_expect_eq(lines, N + 1);
    cr_expect_eq(better, D);
    free(t);
    heed_cleanup();
    rm_cache();
}

Test(wisdom, bad_files)
{
    const char *cache = new_cache();
    char path[512];
    snprintf(path, sizeof path, "%s/w", cache);
    heed_set_warning_handler(NULL, NULL);
    cr_expect_eq(heed_wisdom_import(NULL), HEED_ENULL);
    cr_expect_eq(heed_wisdom_export(NULL), HEED_ENULL);
    cr_expect_eq(heed_wisdom_import("/nonexistent/wisdom"), HEED_EIO);
    spit(path, "");
    cr_expect_eq(heed_wisdom_import(path), HEED_EWISDOM);
    spit(path, "heed-wisdom 2\n" REC("5555555555555555", "gcc", "1", "1", ""));
    cr_expect_eq(heed_wisdom_import(path), HEED_EWISDOM);
    spit(path, "heed-wisdom 1"); /* header only, no newline */
    cr_expect_eq(heed_wisdom_import(path), 0);
    cr_expect_eq(heed_wisdom_export("/nonexistent/dir/wisdom"), HEED_EIO);
    /* a file that is not wisdom (a spec, a typo'd path) is not replaced
     * (issue 41, item 6); an empty one is */
    const char *spec = "return { name = 'mine', heads = 1, lq = 8, dk = 4 }\n";
    spit(path, spec);
    cr_expect_eq(heed_wisdom_export(path), HEED_EWISDOM);
    char *t = slurp(path, NULL);
    cr_expect(t && !strcmp(t, spec), "replaced: %s", t ? t : "(gone)");
    free(t);
    spit(path, "");
    cr_expect_geq(heed_wisdom_export(path), 0);
    t = slurp(path, NULL);
    cr_expect(t && !strncmp(t, "heed-wisdom 1\n", 14), "%s", t ? t : "(gone)");
    free(t);
    rm_cache();
}
