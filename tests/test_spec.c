/* test_spec.c — the generator's command line: bad specs refused with the
 * field, the value and what is allowed (exit 2, nothing written); specs
 * cannot run code; canonical hashes; determinism on LuaJIT and Lua 5.4. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "cli_common.h"

#define OK_FIELDS "name = 'a', lq = 5, dk = 4"

static void hash_of(const char *src, char *hash);

TestSuite(spec, .init = setup, .fini = teardown, .timeout = 60);

Test(spec, accepts_a_good_spec)
{
    cr_assert_eq(gen("return { " OK_FIELDS " }", NULL), 0, "%s", out);
    cr_expect(exists("gen/a.c") && exists("gen/a.h"));
}

/* heed gen --print-name: the kernel names build systems need before they
 * generate (cmake/heedConfig.cmake.in, examples/meson): printed, nothing written. */
Test(spec, print_name_writes_nothing)
{
    cr_assert_eq(gen("return { name = 'pre' .. 'fix', lq = 5, dk = 4 }", "--print-name"), 0, "%s", out);
    cr_expect_str_eq(out, "prefix\n");
    cr_expect(!exists("gen"), "--print-name wrote files");
    cr_assert_eq(gen("return { name = 'a', lq = 5, dk = 4 }", "--print-name --set name=b"), 0, "%s", out);
    cr_expect_str_eq(out, "b\n");
    refused("return { name = 'a', lq = 5, dk = 4, norm = 'softmin' }", "--print-name", "norm", "softmax");
}

Test(spec, unknown_field)
{
    refused("return { " OK_FIELDS ", foo = 1 }", NULL, "unknown field \"foo\"", "allowed: name, heads");
}

/* mask_mod and score_mod (docs/masks.md): expressions checked by
 * gen/expr.lua (field, position, what was expected), patterns of
 * gen/patterns.lua as mask or score_mod, tensors not yet. */
Test(spec, mask_mod_and_score_mod)
{
    refused("return { " OK_FIELDS ", mask_mod = 'q>=k&&' }", NULL, "field 'mask_mod': at position 7",
            "expected an expression after '&&'");
    refused("return { " OK_FIELDS ", mask_mod = 'q + k' }", NULL, "field 'mask_mod'", "must be a bool");
    refused("return { " OK_FIELDS ", score_mod = 's > 1' }", NULL, "field 'score_mod'", "must be a number");
    refused("return { " OK_FIELDS ", mask_mod = 's > 1' }", NULL, "field 'mask_mod': at position 1",
            "only defined in score_mod");
    refused("return { " OK_FIELDS ", mask_mod = 3 }", NULL, "field 'mask_mod'", "allowed: an expression (a string)");
    refused("return { " OK_FIELDS ", mask_mod = 'q * 10000000 * 10000000 * 10000000 > 0' }", NULL,
            "field 'mask_mod'", "2^53");
    refused("return { " OK_FIELDS ", mask_mod = 'd[q] == d[k]' }", NULL, "field 'mask_mod': at position 1",
            "'d' is not a tensor declared under 'tensors'");
    refused("return { " OK_FIELDS ", mask = { kind = 'document', ids = 'd' } }", NULL, "field 'mask'",
            "'d' is not a tensor declared under 'tensors'");
    refused("return { " OK_FIELDS ", mask = { kind = 'window' } }", NULL, "field 'mask'", "sliding_window");
    refused("return { " OK_FIELDS ", mask = { kind = 'sliding_window', left = -1, right = 0 } }", NULL,
            "field 'mask'", "left");
    refused("return { " OK_FIELDS ", score_mod = { kind = 'softcap' } }", NULL, "field 'score_mod'", "c");
    /* with a Gaussian local window and with fuse = max of norm none (P
     * signed): accepted, the window's fields beside the expression in the
     * canonical text (the Gaussian changes the hash), heed check's kernels
     * agree with the reference; the Gaussian's backward exists (with
     * mask_mod too: the plain loops weight P by G), the signed max's is refused */
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'none', mask = { kind = 'local', radius = 2, gaussian = true }, "
                     "mask_mod = 'q>=k' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'mask=local;radius=2;gaussian=1;mask_mod=q >= k$' gen/a.h"), 0, "canonical text");
    run("rm -rf gen");
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'max', norm = 'none', mask_mod = 'q>=k' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'norm=none;fuse=max;mask=none;mask_mod=q >= k$' gen/a.h"), 0, "canonical text");
    run("rm -rf gen");
    {
        char g0[64], g1[64];
        hash_of("return { " OK_FIELDS ", mask = { kind = 'local', radius = 2 }, mask_mod = 'q >= k' }", g0);
        hash_of("return { " OK_FIELDS ", mask = { kind = 'local', radius = 2, gaussian = true }, mask_mod = 'q >= k' }",
                g1);
        cr_expect_str_neq(g0, g1);
    }
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'none', mask = { kind = 'local', radius = 2, gaussian = true }, "
                     "mask_mod = 'q >= k', backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'vf_store(sx, vf_mul(p, gw))' gen/a.c && grep -q 'bt_allow(bh, i, j)' gen/a.c"), 0,
                 "the backward (the tiles) weights P by the window and applies mask_mod");
    run("rm -rf gen");
    refused("return { " OK_FIELDS ", fuse = 'max', norm = 'none', mask_mod = 'q >= k', backward = true }", NULL,
            "field 'backward'", "fuse = \"max\" and norm = \"none\"");
    /* the canonical text holds the normalized expression; a pattern expands to it */
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'none', mask_mod = 'q>=k&&(q-k)<3', "
                     "score_mod = { kind = 'softcap', c = 30 } }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -F -q 'mask=none;mask_mod=q >= k && q - k < 3;score_mod=30 * tanh(s / 30)' gen/a.h"), 0,
                 "canonical text");
    run("rm -rf gen");
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'none', mask = { kind = 'sliding_window', left = 2, right = 0 } }",
                     NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'mask=none;mask_mod=k <= q && q - k <= 2$' gen/a.h"), 0, "canonical text");
    run("rm -rf gen");
    char a[64], b[64], c[64];
    hash_of("return { " OK_FIELDS ", fuse = 'none', mask = 'causal' }", a);
    hash_of("return { " OK_FIELDS ", fuse = 'none', mask = 'causal', mask_mod = 'q - k < 3' }", b);
    hash_of("return { " OK_FIELDS ", fuse = 'none', mask = 'causal', mask_mod = '(q-k)<3' }", c);
    cr_expect_str_neq(a, b);
    cr_expect_str_eq(b, c);
    /* heed check: the kernel table's problem carries them (unnormalized in the spec, normalized in the
     * table) and the reference evaluates them; a pattern too */
    write_file("s.lua", "return { " OK_FIELDS ", fuse = 'none', mask_mod = 'q>=k&&k%3!=1', "
                        "score_mod = { kind = 'alibi' } }");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s%s/heed check s.lua", lua_env, HEED_ROOT);
    cr_expect_eq(run(cmd), 0, "%s", out);
    cr_expect(strstr(out, ": PASS") != NULL, "%s", out);
    /* with backward = true too: libheed's problem has no backward with a
     * score_mod, so the table's problem does not ask for it (it asked, the
     * problem was refused and the check program wrote past 0-sized buffers) */
    write_file("b.lua", "return { " OK_FIELDS ", fuse = 'none', mask = 'causal', lse = true, backward = true, "
                        "score_mod = { kind = 'softcap', c = 2 } }");
    snprintf(cmd, sizeof cmd, "%s%s/heed check b.lua", lua_env, HEED_ROOT);
    cr_expect_eq(run(cmd), 0, "%s", out);
    cr_expect(strstr(out, ": PASS") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s%s/heed gen s.lua -o t --table t/table.c", lua_env, HEED_ROOT);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_expect_eq(run("grep -q '.mask_mod = \"q >= k && k % 3 != 1\", .score_mod = \"s - exp2' t/table.c"), 0,
                 "the table's problem holds the canonical texts");
}

/* mask_mod with a Gaussian window (rows masked whole, Lq != Lk) and with
 * fuse = max of norm none (score_mod shifting P below 0, blocks of 128 that
 * leave whole tiles of its schedule empty): heed check's kernels against libheed's
 * reference. */
Test(spec, mask_mod_gaussian_and_signed_max, .timeout = 120)
{
    char cmd[2048];
    write_file("g.lua", "return { name = 'g', lq = 13, lk = 19, dk = 4, fuse = 'none', norm = 'sigmoid', "
                        "mask = { kind = 'local', radius = 3, gaussian = true }, mask_mod = 'q % 4 != 3 && k != 5' }");
    snprintf(cmd, sizeof cmd, "%s%s/heed check g.lua", lua_env, HEED_ROOT);
    cr_expect_eq(run(cmd), 0, "%s", out);
    cr_expect(strstr(out, ": PASS") != NULL, "%s", out);
    write_file("m.lua", "return { name = 'm', lq = 300, lk = 281, dk = 4, heads = 2, fuse = 'max', norm = 'none', "
                        "mask_mod = 'q // 128 == k // 128 || k >= 256', score_mod = 's - 2' }");
    snprintf(cmd, sizeof cmd, "%s%s/heed check m.lua", lua_env, HEED_ROOT);
    cr_expect_eq(run(cmd), 0, "%s", out);
    cr_expect(strstr(out, ": PASS") != NULL, "%s", out);
}

/* Run-time tensors (issue 39, docs/masks.md): declarations refused with the
 * field (tensors.NAME), the value and what is allowed; NAME_params holds
 * them (a map sorted by name, a list in its order) with their C types; the
 * canonical text holds the declarations (not the fill: bench data). */
#define TENSOR_MASK ", fuse = 'none', mask_mod = { kind = 'document', ids = 'd' }"
Test(spec, run_time_tensors)
{
    refused("return { " OK_FIELDS ", tensors = {} }", NULL, "field 'tensors'", "no tensor declared");
    refused("return { " OK_FIELDS ", tensors = 3 }", NULL, "field 'tensors'", "allowed: { NAME = { dtype");
    refused("return { " OK_FIELDS ", tensors = { D = { dtype = 'i32', shape = { 5 } } } }", NULL, "field 'tensors.D'",
            "lower-case identifier");
    refused("return { " OK_FIELDS ", tensors = { lq = { dtype = 'i32', shape = { 5 } } } }", NULL, "field 'tensors.lq'",
            "not allowed as a tensor name");
    refused("return { " OK_FIELDS ", tensors = { int = { dtype = 'i32', shape = { 5 } } } }", NULL,
            "field 'tensors.int'", "C keyword");
    refused("return { " OK_FIELDS ", tensors = { d = { dtype = 'i64', shape = { 5 } } } }", NULL, "field 'tensors.d'",
            "dtype = \"i64\" is not allowed (allowed: \"i32\", \"f32\")");
    refused("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32' } } }", NULL, "field 'tensors.d'",
            "shape must be a list of 1 to 4 sizes");
    refused("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 'lz' } } } }", NULL, "field 'tensors.d'",
            "shape[1] = \"lz\" is not allowed");
    refused("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 0 } } } }", NULL, "field 'tensors.d'",
            "shape[1] = 0");
    refused("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 5 }, size = 5 } } }", NULL,
            "field 'tensors.d'", "unknown field \"size\"");
    refused("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 5 }, fill = { kind = 'zipf' } } } }", NULL,
            "field 'tensors.d'", "fill is not allowed");
    refused("return { " OK_FIELDS ", tensors = { { name = 'd', dtype = 'i32', shape = { 5 } }, { name = 'd', dtype = 'f32', "
            "shape = { 5 } } } }", NULL, "field 'tensors'", "'d' is declared twice");
    refused("return { " OK_FIELDS ", score = 'general', tensors = { w = { dtype = 'f32', shape = { 5 } } } }", NULL,
            "field 'tensors.w'", "score = \"general\"'s weight");
    refused("return { " OK_FIELDS ", score = 'additive', da = 4, tensors = { v_a = { dtype = 'f32', shape = { 5 } } } }",
            NULL, "field 'tensors.v_a'", "score = \"additive\"'s weight");
    refused("return { " OK_FIELDS ", tensors = { d = { dtype = 'f32', shape = { 5 } } }, mask_mod = 'k < d[q * 0.5]' }",
            NULL, "field 'mask_mod': at position 7", "the index of 'd' must be an int");
    /* backward = true with run-time tensors: NAME_backward takes p, and no
       NAME_grads (the tensors get no gradient; docs/backward.md) */
    cr_assert_eq(gen("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 'lk' } } }" TENSOR_MASK
                     ", backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("tr -d '\\n' < gen/a.h | grep -q 'int a_backward([^;]*float \\*dv, const a_params \\*p);'"), 0,
                 "a_backward takes the tensors' p");
    cr_expect_neq(run("grep -q a_grads gen/a.h"), 0, "a_grads without weights");
    /* NAME_params: the C types, a map sorted by name, a list in its order */
    cr_assert_eq(gen("return { " OK_FIELDS ", tensors = { e = { dtype = 'f32', shape = { 'lq', 'lk' } }, "
                     "d = { dtype = 'i32', shape = { 'lk' }, fill = { kind = 'segments', n = 2 } } }" TENSOR_MASK
                     ", score_mod = 's + e[q * lk + k]' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -F -q ';tensors=d:i32[5],e:f32[5,5]' gen/a.h"), 0, "canonical text");
    cr_expect_eq(run("tr -d '\\n' < gen/a.h | grep -q 'const int32_t \\*d;.*const float \\*e;'"), 0,
                 "NAME_params sorted by name");
    run("rm -rf gen");
    cr_assert_eq(gen("return { " OK_FIELDS ", tensors = { { name = 'e', dtype = 'f32', shape = { 'lq', 'lk' } }, "
                     "{ name = 'd', dtype = 'i32', shape = { 'lk' } } }" TENSOR_MASK ", score_mod = 's + e[q * lk + k]' }",
                     NULL), 0, "%s", out);
    cr_expect_eq(run("tr -d '\\n' < gen/a.h | grep -q 'const float \\*e;.*const int32_t \\*d;'"), 0,
                 "NAME_params in the list's order");
    run("rm -rf gen");
    /* the declarations are part of the operator, their fill is not */
    char a[64], b[64], c[64];
    hash_of("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 'lk' } } }" TENSOR_MASK " }", a);
    hash_of("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 6 } } }" TENSOR_MASK " }", b);
    hash_of("return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 5 }, fill = { kind = 'segments', n = 3 } } }"
            TENSOR_MASK " }", c);
    cr_expect_str_neq(a, b);
    cr_expect_str_eq(a, c);
    /* heed check takes them (libheed's problem carries the declarations, its
     * inputs fill the tensors: runtime/verify.h) and passes */
    write_file("s.lua", "return { " OK_FIELDS ", tensors = { d = { dtype = 'i32', shape = { 'lk' } } }" TENSOR_MASK " }");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s%s/heed check s.lua", lua_env, HEED_ROOT);
    cr_expect_eq(run(cmd), 0, "heed check: %s", out);
    cr_expect(strstr(out, "PASS"), "heed check: %s", out);
}

Test(spec, bad_choices_name_the_allowed_values)
{
    refused("return { " OK_FIELDS ", norm = 'softmx' }", NULL, "field 'norm'", "softmax, sigmoid, relu, none");
    refused("return { " OK_FIELDS ", score = 'dott' }", NULL, "field 'score'",
            "dot, scaled_dot, general, additive, cosine, location");
    refused("return { " OK_FIELDS ", fuse = 3 }", NULL, "field 'fuse'", "none, mean, sum, max");
    refused("return { " OK_FIELDS ", mask = { kind = 'window' } }", NULL, "field 'mask'", "none, causal, local");
    refused("return { " OK_FIELDS ", mask = { kind = 'causal', radius = 3 } }", NULL, "mask.radius", "allowed: kind");
}

/* heads_kv must divide heads; the message names the field, the value and the divisors. */
Test(spec, heads_kv_must_divide_heads)
{
    refused("return { " OK_FIELDS ", heads = 8, heads_kv = 3 }", NULL, "field 'heads_kv': 3 does not divide heads = 8",
            "allowed: a divisor of heads: 1, 2, 4, 8");
    refused("return { " OK_FIELDS ", heads = 2, heads_kv = 0 }", NULL, "field 'heads_kv'", "out of range");
    refused("return { " OK_FIELDS ", heads = 4, heads_kv = 1.5 }", NULL, "field 'heads_kv'", "not an integer");
    refused("return { " OK_FIELDS ", heads = 2, heads_kv = 4 }", NULL, "field 'heads_kv'", "divisor of heads: 1, 2");
}

/* lse = true only for standard attention with softmax; a boolean. */
Test(spec, lse_only_for_standard_softmax)
{
    refused("return { " OK_FIELDS ", lse = true }", NULL, "field 'lse'", "fuse = \"none\" and norm = \"softmax\"");
    refused("return { " OK_FIELDS ", fuse = 'none', norm = 'relu', lse = true }", NULL, "field 'lse'",
            "norm = \"relu\"");
    refused("return { " OK_FIELDS ", fuse = 'none', lse = 'yes' }", NULL, "field 'lse'", "allowed: true, false");
}

Test(spec, wrong_types)
{
    refused("return { name = 'a', lq = '5', dk = 4 }", NULL, "field 'lq'", "not an integer");
    refused("return { " OK_FIELDS ", heads = 2.5 }", NULL, "field 'heads'", "not an integer");
    refused("return { name = 5, lq = 5, dk = 4 }", NULL, "field 'name'", "C identifier");
    refused("return { " OK_FIELDS ", scale = 'big' }", NULL, "field 'scale'", "finite number");
    refused("return { " OK_FIELDS ", scale = 0/0 }", NULL, "field 'scale'", "finite number");
    refused("return { " OK_FIELDS ", mask = { kind = 'local', radius = 2, gaussian = 'yes' } }", NULL,
            "mask.gaussian", "true, false");
    refused("return 5", NULL, "must return a table", NULL);
}

Test(spec, required_fields)
{
    refused("return { lq = 5, dk = 4 }", NULL, "field 'name' is required", NULL);
    refused("return { name = 'a', dk = 4 }", NULL, "field 'lq' is required", NULL);
    refused("return { " OK_FIELDS ", mask = 'local' }", NULL, "mask.radius", "required");
}

Test(spec, negative_zero_and_huge_sizes)
{
    refused("return { name = 'a', lq = 0, dk = 4 }", NULL, "field 'lq'", "out of range");
    refused("return { name = 'a', lq = 5, dk = -3 }", NULL, "field 'dk'", "out of range");
    refused("return { " OK_FIELDS ", mask = { kind = 'local', radius = -1 } }", NULL, "mask.radius", "0..");
    refused("return { name = 'a', lq = 5, dk = 4, heads = 4194304 }", NULL, "field 'heads'", "out of range");
    refused("return { name = 'a', heads = 4096, lq = 1048576, dk = 1024 }", NULL, "sizes too large",
            "heads*lq*dk");
    refused("return { " OK_FIELDS ", score = 'location', lk = 1048576, dk = 4096, heads = 1024 }", NULL,
            "sizes too large", NULL);
}

Test(spec, names_cannot_escape)
{
    refused("return { name = '../../x', lq = 5, dk = 4 }", NULL, "field 'name'", "C identifier");
    refused("return { name = 'int', lq = 5, dk = 4 }", NULL, "field 'name'", "keyword");
}

/* Names the kernel file declares or links are refused (exit 2, field
 * 'name', the value, why): C keywords and reserved identifiers, libc, libm,
 * POSIX, pthreads, OpenMP and libheed names (heed_, hrt_, hreg_: the
 * registry's kernels, which a kernel linked with libheed.a would replace;
 * test_runtime's exported_prefixes_reserved checks every prefix libheed.a
 * exports), the identifiers the generated file declares for itself (read
 * off the rendered file, gen/names.lua: not_finite and tile_band were
 * missing from the hand-kept list this replaced). attn and ATTN get two include guards; two specs naming one
 * kernel in one gen are refused naming both files. */
Test(spec, reserved_names)
{
    const char *names[] = { "exp", "expf", "sqrtf", "memcpy", "malloc", "free", "printf", "pthread_create",
                            "omp_get_max_threads", "size_t", "uint8_t", "NULL", "INFINITY", "_Bool", "_Atomic",
                            "_Generic", "__x", "_Foo", "H", "LQ", "SCALE_S", "imin", "overlaps", "heed_plan_create",
                            "hrt_x", "hreg_avx2_bert_128", "check_args", "vf_exp", "bool", "not_finite", "tile_band",
                            "score_tile" };
    char src[256];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(src, sizeof src, "return { name = '%s', lq = 5, dk = 4 }", names[i]);
        char val[80];
        snprintf(val, sizeof val, "\"%s\" is not allowed (reserved", names[i]);
        refused(src, NULL, "field 'name'", val);
    }
    /* the registry's prefix says why; only libheed's own build (--registry) takes it */
    refused("return { name = 'hreg_avx2_bert_128', lq = 5, dk = 4 }", NULL, "field 'name'",
            "are libheed's built-in kernels");
    cr_expect_eq(gen("return { name = 'hreg_avx2_bert_128', lq = 5, dk = 4 }", "--registry --print-name"), 0, "%s", out);
    cr_expect_str_eq(out, "hreg_avx2_bert_128\n");
    write_file("a1.lua", "return { name = 'attn', lq = 5, dk = 4 }");
    write_file("a2.lua", "return { name = 'ATTN', lq = 5, dk = 4 }");
    cr_assert_eq(run(HEED_ROOT "/heed gen a1.lua a2.lua -o two"), 0, "%s", out);
    cr_expect_eq(run("printf '#include \"attn.h\"\\n#include \"ATTN.h\"\\nint f(void) { return attn != ATTN; }\\n' > two/u.c "
                     "&& cc -std=c11 -Wall -Werror -c two/u.c -o two/u.o"), 0,
                 "attn.h and ATTN.h share a guard: %s", out);
    write_file("a3.lua", "return { name = 'attn', lq = 7, dk = 4 }");
    cr_expect_eq(run(HEED_ROOT "/heed gen a1.lua a3.lua -o three"), 2, "%s", out);
    cr_expect(strstr(out, "a1.lua and a3.lua: field 'name': both name the kernel \"attn\""), "%s", out);
    cr_expect(!exists("three"), "written despite the clash");
}

Test(spec, fields_that_do_not_apply)
{
    refused("return { " OK_FIELDS ", da = 8 }", NULL, "field 'da'", "additive");
}

Test(spec, cannot_run_code)
{
    char marker[512];
    snprintf(marker, sizeof marker, "return { " OK_FIELDS ", x = os.execute('touch %s/pwned') }", dir);
    refused(marker, NULL, "os", NULL);
    cr_expect(!exists("pwned"), "the spec ran a command");
    refused("return { " OK_FIELDS ", x = io.open('/etc/passwd') }", NULL, "io", NULL);
    refused("return { " OK_FIELDS ", x = require('os') }", NULL, "require", NULL);
    refused("return { " OK_FIELDS ", x = load('return 1') }", NULL, "load", NULL);
    refused("while true do end", NULL, "ran too long", NULL);
    refused("return {", NULL, "s.lua", NULL);
}

/* The sandbox's limits hold on both interpreters and for every argument
 * type: string.rep with a number as receiver or a count as a string (once
 * coerced past the cap: 1.34 GB), a count alone too large, one concatenation
 * of 100 strings of 1 MiB at the spec's end (200 MB on LuaJIT, unseen by the
 * instruction hook), and a table of 20,000 keys (1.2 M took 12.5 s in the
 * validator's sort): each refused with exit 2 and its reason. */
Test(spec, sandbox_limits_hold_on_both_interpreters, .timeout = 240)
{
    char cat[2048] = "local s = ('x'):rep(2^20)\nlocal t = s";
    for (int i = 1; i < 100; i++) strcat(cat, "..s");
    strcat(cat, "\nreturn { " OK_FIELDS ", x = #t }");
    const char *interp[] = { "HEED_LUA=luajit ", "HEED_LUA=lua5.4 " };
    for (int i = 0; i < 2; i++) {
        lua_env = interp[i];
        refused("local s = ('x').rep(1234567890, 2^27)\nreturn { " OK_FIELDS " }", NULL, "string.rep: argument 1 must be a string",
                "got number");
        refused("local s = ('x'):rep('300000000')\nreturn { " OK_FIELDS " }", NULL, "string.rep: argument 2 must be a number",
                "got string");
        refused("local s = (''):rep(2^60)\nreturn { " OK_FIELDS " }", NULL, "string.rep: a result of more than 1048576",
                NULL);
        refused("local s = ('x'):rep(10, 5)\nreturn { " OK_FIELDS " }", NULL, "argument 3 must be a string", NULL);
        refused(cat, NULL, "the spec used too much memory", NULL);
        refused("local t = { " OK_FIELDS " }\nfor i = 1, 20000 do t[i] = true end\nreturn t", NULL,
                "the spec's table holds more than 4096 keys", NULL);
        refused("return { " OK_FIELDS ", mask = { kind = 'none', [{}] = { x = { y = 1 } } } }", NULL, "mask.", NULL);
        cr_assert_eq(gen("return { " OK_FIELDS ", scale = #(('ab'):rep(3, ',')) }", NULL), 0, "%s: %s", interp[i], out);
        run("rm -rf gen");
    }
    lua_env = "";
}

/* Numbers: scale is finite, nonzero and 1e-30 <= |scale| <= 1e30 (1e308 and
 * 3e38 made C that gcc refused, 1e-320 a denormal); --set on a field that is
 * no table, a schedule key given twice, --batch beyond an int and --threads
 * beyond a count are usage errors without a traceback on both interpreters. */
Test(spec, numbers_in_range, .timeout = 120)
{
    const char *interp[] = { "HEED_LUA=luajit ", "HEED_LUA=lua5.4 " };
    char cmd[1024];
    for (int i = 0; i < 2; i++) {
        lua_env = interp[i];
        refused("return { " OK_FIELDS ", scale = 1e308 }", NULL, "field 'scale'", "1e-30 <= |scale| <= 1e+30");
        refused("return { " OK_FIELDS ", scale = 3e38 }", NULL, "field 'scale'", "1e-30 <= |scale| <= 1e+30");
        refused("return { " OK_FIELDS ", scale = 1e-320 }", NULL, "field 'scale'", "1e-30 <= |scale| <= 1e+30");
        refused("return { " OK_FIELDS ", scale = 0 }", NULL, "field 'scale'", "1e-30 <= |scale| <= 1e+30");
        refused("return { " OK_FIELDS ", scale = -1.5e30 }", NULL, "field 'scale'", NULL);
        refused("return { " OK_FIELDS " }", "--set lq.x=1", "--set lq.x=1: field 'lq' is 5, not a table", NULL);
        refused("return { " OK_FIELDS " }", "--schedule bq=8,bq=16", "bq is given twice (bq=8 and bq=16)", NULL);
        for (int t = 0; t < 3; t++) {
            const char *bad[] = { "1e308", "inf", "nan" };
            refused("return { " OK_FIELDS " }", t == 0 ? "--wisdom w --threads 1e308"
                    : t == 1 ? "--wisdom w --threads inf" : "--wisdom w --threads nan", "--threads", bad[t]);
            cr_expect(!strstr(out, "traceback") && !strstr(out, "internal error"), "%s", out);
        }
        snprintf(cmd, sizeof cmd, "%s%s/heed tune s.lua --batch 1e12 -o gen", interp[i], HEED_ROOT);
        cr_expect_eq(run(cmd), 2, "%s", out);
        cr_expect(strstr(out, "--batch: \"1e12\" is not allowed (allowed: integer 1..65536)"), "%s", out);
        cr_assert_eq(gen("return { " OK_FIELDS ", scale = -1e30 }", NULL), 0, "%s", out);
        cr_assert_eq(gen("return { " OK_FIELDS ", scale = 1e-30 }", NULL), 0, "%s", out);
        run("rm -rf gen");
    }
    lua_env = "";
}

/* A spec file is a regular file of at most 1 MiB (issue 41, item 9): the old
 * loader read /dev/zero until the memory ran out (GBs), blocked forever on a
 * FIFO and took a 2 MiB spec. /dev/zero, a FIFO, a directory and a 2 MiB
 * spec (a good one padded with a comment) are each refused before anything
 * is read, exit 2, the message naming the file and the limit, on both
 * interpreters and through every command that reads a spec. `timeout` (exit
 * 124) turns a hang into a failure; ulimit -v bounds what the old code took. */
Test(spec, spec_file_is_a_small_regular_file, .timeout = 240)
{
    write_file("big.lua", "return { " OK_FIELDS " }\n");
    char path[512];
    snprintf(path, sizeof path, "%s/big.lua", dir);
    FILE *f = fopen(path, "a");
    cr_assert(f);
    fputs("--", f);
    for (int i = 0; i < 2 * 1024 * 1024; i++) fputc('x', f);
    fputc('\n', f);
    fclose(f);
    cr_assert_eq(run("mkfifo fifo && mkdir adir"), 0, "%s", out);
    const char *files[] = { "/dev/zero", "fifo", "adir", "big.lua" };
    const char *why[] = { "/dev/zero is a character special file, not a regular file: refused (a spec must be a regular file)",
                          "fifo is a fifo, not a regular file: refused (a spec must be a regular file)",
                          "adir is a directory, not a regular file: refused (a spec must be a regular file)",
                          "big.lua: 2097193 bytes, more than a spec may hold (1048576): refused" };
    const char *cmds[] = { "gen %s -o gen", "gen --print-name %s", "check %s", "tune %s --budget 3 -o gen",
                           "campaign %s --engine make -o camp" };
    const char *interp[] = { "luajit", "lua5.4" };
    for (int i = 0; i < 2; i++)
        for (size_t c = 0; c < sizeof cmds / sizeof *cmds; c++)
            for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
                char args[256], cmd[1024];
                snprintf(args, sizeof args, cmds[c], files[k]);
                snprintf(cmd, sizeof cmd, "(ulimit -v 2000000; HEED_LUA=%s timeout 20 %s/heed %s)", interp[i], HEED_ROOT,
                         args);
                int rc = run(cmd);
                cr_expect_eq(rc, 2, "%s heed %s: exit %d: %s", interp[i], args, rc, out);
                cr_expect(strstr(out, why[k]) != NULL, "%s heed %s: %s", interp[i], args, out);
                cr_expect(!exists("gen") && !exists("camp"), "%s heed %s wrote output", interp[i], args);
            }
    struct stat sb;
    snprintf(path, sizeof path, "%s/fifo", dir);
    cr_expect(lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    /* a spec just under the limit is read */
    cr_assert_eq(run("truncate -s 1048576 big.lua"), 0, "%s", out);
    snprintf(path, sizeof path, "HEED_LUA=lua5.4 %s/heed gen big.lua -o gen", HEED_ROOT);
    cr_expect_eq(run(path), 0, "%s", out);
}

Test(spec, math_is_available)
{
    cr_assert_eq(gen("return { name = 'a', lq = 5, dk = 4, dv = 9, scale = 1 / math.sqrt(9) }", NULL), 0, "%s", out);
}

Test(spec, set_and_schedule_arguments)
{
    refused("return { " OK_FIELDS " }", "--set lq=abc", "field 'lq'", NULL);
    refused("return { " OK_FIELDS " }", "--set mask.kind=local", "mask.radius", "required");
    refused("return { " OK_FIELDS " }", "--schedule bq=3", "bq=3", "allowed: 1, 2, 4, 8");
    refused("return { " OK_FIELDS " }", "--schedule nope=1", "unknown parameter 'nope'", "bq, bk");
    cr_assert_eq(gen("return { " OK_FIELDS " }", "--set mask.kind=local --set mask.radius=1 --schedule bq=2,bk=8"), 0,
                 "%s", out);
    cr_expect_eq(run("grep -q 'schedule:  bq=2,bk=8' gen/a.c && grep -q 'mask=local radius=1' gen/a.c"), 0);
}

Test(spec, canonical_hash_ignores_spelling)
{
    char a[64], b[64], c[64];
    hash_of("return { name = 'a', lq = 8, dk = 16 }", a);
    hash_of("return { dk = 16, name = 'a', lq = 8.0, lk = 8, dv = 16, heads = 1, scale = 0.25,\n"
            "  score = { kind = 'scaled_dot' }, mask = { kind = 'none' }, norm = 'softmax', fuse = 'mean' }", b);
    hash_of("return { name = 'a', lq = 8, dk = 16, fuse = 'sum' }", c);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c);
}

/* Storage types: unknown values are refused naming the field and the
 * allowed values; f32 spelled out hashes as left out (f32 hashes and wisdom
 * keys did not change when the fields came), 16-bit types hash apart; the
 * N-d forms take them (tests/test_nd.c) but for heads_kv on the X forms. */
Test(spec, storage_types)
{
    refused("return { " OK_FIELDS ", dtype = 'f64' }", NULL, "field 'dtype'", "allowed: f32, bf16, f16");
    refused("return { " OK_FIELDS ", out_dtype = 'fp16' }", NULL, "field 'out_dtype'", "allowed: f32, bf16, f16");
    refused("return { " OK_FIELDS ", dtype = 16 }", NULL, "field 'dtype'", "allowed: f32, bf16, f16");
    refused("return { name = 'a', form = 'neighborhood', map = {9}, kernel = {3}, dk = 4, dtype = 'f64' }", NULL,
            "field 'dtype'", "allowed: f32, bf16, f16");
    refused("return { name = 'a', form = 'patches', channels = 2, map = {8}, window = 4, heads_kv = 1 }", NULL,
            "field 'heads_kv'", "allowed for neighborhood and halo");
    char a[64], b[64], c[64], d[64], e[64];
    hash_of("return { name = 'a', lq = 8, dk = 16 }", a);
    hash_of("return { name = 'a', lq = 8, dk = 16, dtype = 'f32', out_dtype = 'f32' }", b);
    hash_of("return { name = 'a', lq = 8, dk = 16, dtype = 'bf16' }", c);
    hash_of("return { name = 'a', lq = 8, dk = 16, dtype = 'f16' }", d);
    hash_of("return { name = 'a', lq = 8, dk = 16, out_dtype = 'bf16' }", e);
    cr_expect_str_eq(a, b);
    cr_expect(strncmp(a, "9f787e4243d00b6f", 16) == 0, "hash %s", a); /* the hash this problem had before dtype existed */
    cr_expect_str_neq(a, c);
    cr_expect_str_neq(c, d);
    cr_expect_str_neq(a, e);
    cr_expect_str_neq(c, e);
}

/* backward = true (and gen --backward): a boolean, refused naming the field
 * for the forms NAME_backward does not cover yet (docs/backward.md) and for
 * N-d specs but the neighborhood's; accepted with the Gaussian window (its
 * weight in the backward), for the fused forms and with mask_mod / score_mod
 * (score_mod's derivative in the C); the canonical form gains ";backward=1"
 * only when true, so other specs keep their hash; the files declare and
 * define NAME_backward (with NAME_grads for the weights). */
Test(spec, backward_field_and_flag)
{
    refused("return { " OK_FIELDS ", fuse = 'none', backward = 'yes' }", NULL, "field 'backward'", "allowed: true, false");
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'none', mask = { kind = 'local', radius = 1, gaussian = true }, "
                     "backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'static inline vf bt_gv' gen/a.c && grep -q 'bt_gauss_dp(dp, jb, nk, cf)' gen/a.c"), 0,
                 "the Gaussian weight in the backward (the tiles: fuse none)");
    run("rm -rf gen");
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'mean', mask = { kind = 'local', radius = 1, gaussian = true }, "
                     "backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'bt_gk(jb + x, cf + u)' gen/a.c"), 0, "the Gaussian weight in the backward (the tiles: fused)");
    run("rm -rf gen");
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'mean', norm = 'sigmoid', mask = { kind = 'local', radius = 1, "
                     "gaussian = true }, backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'static inline float bwd_gw' gen/a.c"), 0, "the Gaussian weight in the plain loops (fused)");
    run("rm -rf gen");
    /* (an N-d form's refusal names the field: tests/test_nd_spec.c has the rest) */
    refused("return { name = 'a', form = 'patches', channels = 2, map = {8}, window = 4, score = 'cosine', backward = true }",
            NULL, "field 'backward'", "with score = \"cosine\"");
    char a[64], b[64], c[64], d[64];
    hash_of("return { name = 'a', lq = 8, dk = 16, fuse = 'none' }", a);
    hash_of("return { name = 'a', lq = 8, dk = 16, fuse = 'none', backward = false }", b);
    hash_of("return { name = 'a', lq = 8, dk = 16, fuse = 'none', backward = true }", c);
    cr_expect(strncmp(a, "95c3f7ad4c796735", 16) == 0, "hash %s", a); /* the hash this problem had before backward */
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c);
    cr_assert_eq(gen("return { name = 'a', lq = 8, dk = 16, fuse = 'none' }", "--backward"), 0, "%s", out);
    cr_assert_eq(run("sed -n 's/^ \\* hash: *//p' gen/a.h"), 0);
    strncpy(d, out, 63);
    d[63] = 0;
    cr_expect_str_eq(c, d, "--backward hashes as backward = true");
    cr_expect_eq(run("grep -c 'int a_backward(int batch' gen/a.h gen/a.c"), 0, "%s", out);
    cr_expect(strstr(out, "gen/a.h:1") && strstr(out, "gen/a.c:1"), "NAME_backward in both files: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { name = 'a', lq = 8, dk = 16, fuse = 'none' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -l '_backward' gen/a.c gen/a.h"), 1, "without backward, no NAME_backward: %s", out);
    /* the fused forms (fuse = "mean" is the default) */
    run("rm -rf gen");
    cr_assert_eq(gen("return { name = 'a', lq = 8, dk = 16, fuse = 'max', mask = 'causal' }", "--backward"), 0, "%s", out);
    cr_expect_eq(run("grep -c 'int a_backward(int batch' gen/a.h gen/a.c"), 0, "%s", out);
    /* every score, 16-bit storage: the weights' gradients in a_grads */
    run("rm -rf gen");
    cr_assert_eq(gen("return { name = 'a', lq = 8, dk = 16, score = 'additive', da = 4, dtype = 'bf16' }", "--backward"),
                 0, "%s", out);
    cr_expect_eq(run("grep -c 'typedef struct a_grads\\|const float \\*lse, uint16_t \\*dq' "
                     "gen/a.h"), 0, "%s", out);
    cr_expect_eq(atoi(out), 2, "a_grads and 16-bit gradients declared: %s", out);
    /* mask_mod and score_mod: the backward applies both, score_mod's derivative generated */
    run("rm -rf gen");
    cr_assert_eq(gen("return { " OK_FIELDS ", fuse = 'none', mask_mod = 'k <= q', score_mod = { kind = 'softcap', "
                     "c = 30 } }", "--backward"), 0, "%s", out);
    /* (on the register-blocked tiles: the predicate in partial blocks only, gen/backward_tiles.lua) */
    cr_expect_eq(run("grep -q 'if (partial && !bt_allow(bh, i, j)) {' gen/a.c"), 0, "mask_mod in a_backward");
    cr_expect_eq(run("grep -q -F '30 * ((1.0 - tanh(s / 30) * tanh(s / 30)) * 0.03333333333333333)' gen/a.c"), 0,
                 "score_mod's derivative in a_backward");
    /* (both as vector code on the tiles, gen/vexpr.lua: d/ds of 30·tanh(s/30) in lanes) */
    cr_expect_eq(run("grep -q -F 'd = vf_mul(vf_set1(30.0f), vf_mul(vf_sub(vf_set1(1.0f), vf_mul(vf_tanh(' gen/a.c"), 0,
                 "score_mod's derivative as vector code in a_backward");
}

TestSuite(generator, .init = setup, .fini = teardown, .timeout = 120);

Test(generator, deterministic_and_identical_on_luajit_and_lua54)
{
    char cmd[2048];
    const char *interp[] = { "luajit", "lua5.4" };
    for (int i = 0; i < 2; i++) {
        for (int rep = 0; rep < 2; rep++) {
            snprintf(cmd, sizeof cmd, "HEED_LUA=%s %s/heed gen %s/examples/*.lua -o out_%s_%d", interp[i], HEED_ROOT,
                     HEED_ROOT, interp[i], rep);
            cr_assert_eq(run(cmd), 0, "%s: %s", interp[i], out);
        }
    }
    cr_expect_eq(run("diff -r out_luajit_0 out_luajit_1"), 0, "%s", out);
    cr_expect_eq(run("diff -r out_luajit_0 out_lua5.4_0"), 0, "%s", out);
    cr_expect_eq(run("diff -r out_lua5.4_0 out_lua5.4_1"), 0, "%s", out);
    cr_expect_eq(run("grep -L 'generated by heed' out_luajit_0/* | wc -l | grep -qx 0"), 0, "a file lacks provenance");
    cr_expect_neq(run("grep -l '20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]' out_luajit_0/*"), 0, "a file has a date: %s", out);
}

Test(generator, examples_compile_with_werror)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s/heed gen %s/examples/*.lua -o ex && for f in ex/*.c; do "
             "cc -std=c11 -O2 -march=native -fopenmp -Wall -Wextra -Werror -c \"$f\" -o \"$f.o\" || exit 1; done",
             HEED_ROOT, HEED_ROOT);
    cr_expect_eq(run(cmd), 0, "%s", out);
}

/* out overlapping a weight (general, additive, location): the kernel returns
 * HEED_KERNEL_EOVERLAP with out and the weights untouched (it returned 0 and
 * overwrote them). */
Test(generator, out_overlapping_a_weight_is_refused)
{
    const char *prog =
        "#include <stdio.h>\n#include <string.h>\n#include \"w.h\"\n"
        "static float q[2*5*4], k[2*5*4], v[2*5*4], wb[4096];\n"
        "int main(void) {\n"
        "  for (int i = 0; i < 4096; i++) wb[i] = (float)i;\n"
        "  w_params p; const float **f = (const float **)&p;\n"
        "  for (size_t j = 0; j < sizeof p / sizeof *f; j++) f[j] = wb + 512 * j;\n"
        "  for (size_t j = 0; j < sizeof p / sizeof *f; j++) {\n"
        "    int r = w(2, q, k, v, wb + 512 * j + 1, &p);\n"
        "    if (r != HEED_KERNEL_EOVERLAP) { printf(\"weight %zu: %d\\n\", j, r); return 1; }\n"
        "  }\n"
        "  for (int i = 0; i < 4096; i++) if (wb[i] != (float)i) { printf(\"touched %d\\n\", i); return 1; }\n"
        "  static float o[2*5*4];\n"
        "  return w(2, q, k, v, o, &p) == 0 ? 0 : 1;\n}\n";
    write_file("main.c", prog);
    const char *scores[] = { "general", "additive", "location" };
    char src[256], cmd[1024];
    for (int i = 0; i < 3; i++) {
        snprintf(src, sizeof src, "return { name = 'w', lq = 5, dk = 4, fuse = 'none', score = '%s' }", scores[i]);
        cr_assert_eq(gen(src, NULL), 0, "%s", out);
        snprintf(cmd, sizeof cmd, "cc -std=c11 -O1 -fopenmp -Igen gen/w.c main.c -lm -o m && ./m");
        cr_expect_eq(run(cmd), 0, "%s: %s", scores[i], out);
        run("rm -rf gen m");
    }
}

Test(generator, help_lists_every_field)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/heed gen --help", HEED_ROOT);
    cr_assert_eq(run(cmd), 0, "%s", out);
    const char *needles[] = { "name", "heads", "lq", "lk", "dk", "dv", "da", "scale", "scaled_dot", "additive",
                              "location", "cosine", "general", "softmax", "sigmoid", "relu", "mean", "max",
                              "causal", "local", "gaussian", "radius",
                              /* the N-d fields (gen/nd.lua) */
                              "form", "patches", "collection", "neighborhood", "halo", "map", "channels",
                              "window", "stride", "count", "f_q", "f_k", "f_v", "g_v", "fold", "flat",
                              "kernel", "dilation", "block", "padding", "clamp", "bias", "relative", "clip",
                              "shift", "relative_joint" };
    for (size_t i = 0; i < sizeof needles / sizeof *needles; i++)
        cr_expect(strstr(out, needles[i]) != NULL, "help lacks %s", needles[i]);
}

Test(generator, usage_errors_exit_2)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/heed frobnicate", HEED_ROOT);
    cr_expect_eq(run(cmd), 2, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/heed gen", HEED_ROOT);
    cr_expect_eq(run(cmd), 2, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/heed gen missing.lua", HEED_ROOT);
    cr_expect_eq(run(cmd), 2, "%s", out);
    cr_expect(strstr(out, "missing.lua") != NULL, "%s", out);
}

Test(generator, check_passes_and_reports)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/heed check %s/examples/vit_pool.lua", HEED_ROOT, HEED_ROOT);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_expect(strstr(out, "PASS") && strstr(out, "max |err|"), "%s", out);
}

/* --target: the provenance names the target; scalar writes no intrinsics and
 * still compiles with -Werror; avx2, avx512 and neon put their code under
 * their feature macros (both paths compile);
 * an unknown target is a usage error naming the allowed ones. */
Test(generator, target_option)
{
    const char *src = "return { " OK_FIELDS ", heads = 2, fuse = 'none', mask = 'causal' }";
    cr_assert_eq(gen(src, "--target scalar"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    scalar' gen/a.c"), 0, "provenance lacks the target: %s", out);
    cr_expect_eq(run("grep -c -- '--target scalar' gen/a.c"), 0, "command lacks --target: %s", out);
    cr_expect_neq(run("grep -n '_mm\\|immintrin\\|__AVX\\|__m256' gen/a.c"), 0, "intrinsics in scalar output: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -fopenmp -Wall -Wextra -Werror -c gen/a.c -o gen/a.o"), 0, "%s", out);

    cr_assert_eq(gen(src, "--target avx2"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    avx2' gen/a.c"), 0, "provenance lacks the target: %s", out);
    cr_expect_eq(run("grep -c '^#if defined(__AVX2__) && defined(__FMA__)' gen/a.c"), 0, "no AVX2 guard: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -march=x86-64 -fopenmp -Wall -Wextra -Werror -c gen/a.c -o gen/a.o"), 0,
                 "the portable path of an avx2 file: %s", out);

    cr_assert_eq(gen(src, "--target avx512"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    avx512 (16 float lanes' gen/a.c"), 0, "provenance lacks the target: %s", out);
    cr_expect_eq(run("grep -c '^#if defined(__AVX512F__)' gen/a.c"), 0, "no AVX-512 guard: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -march=x86-64 -fopenmp -Wall -Wextra -Werror -c gen/a.c -o gen/a.o"), 0,
                 "the portable path of an avx512 file: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -march=x86-64 -mavx512f -fopenmp -Wall -Wextra -Werror -c gen/a.c -o gen/a.o"), 0,
                 "the zmm path of an avx512 file: %s", out);
    cr_expect_eq(run("rm -rf gen"), 0);

    /* neon: its code under the aarch64 guard, the portable path elsewhere (here) */
    cr_assert_eq(gen(src, "--target neon"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    neon' gen/a.c"), 0, "provenance lacks the target: %s", out);
    cr_expect_eq(run("grep -A1 '^#if defined(__ARM_NEON) && defined(__aarch64__)' gen/a.c | grep -c arm_neon.h"), 0,
                 "no NEON guard around arm_neon.h: %s", out);
    cr_expect_neq(run("grep -n '_mm\\|immintrin' gen/a.c"), 0, "x86 intrinsics in neon output: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -fopenmp -Wall -Wextra -Werror -c gen/a.c -o gen/a.o"), 0,
                 "the portable path of a neon file: %s", out);
    cr_expect_eq(run("rm -rf gen"), 0);

    refused(src, "--target avx9", "--target: unknown target 'avx9'", "allowed: avx512, avx2, neon, scalar");
    refused(src, "--target order", "--target: unknown target 'order'", "allowed: avx512, avx2, neon, scalar");
}

/* --target for the N-d forms (templates/nd_local.c, nd_patches.c on the
 * target layer): the provenance names the target; a windowed kernel's strips
 * default to the target's lanes and its vectors are the target's vf under its
 * guard (other lane counts: portable vectors, no intrinsics); scalar and the
 * X forms write no intrinsics; every file compiles with -Werror where its
 * target's code is off and where it is on. */
#define ND_NB "return { name = 'n', form = 'neighborhood', map = { 9, 21 }, kernel = { 3, 5 }, dk = 8, dv = 6 }"
#define ND_PT "return { name = 'n', form = 'patches', channels = 2, map = { 8, 8 }, window = 4, fuse = 'mean' }"
Test(generator, nd_target_option)
{
    cr_assert_eq(gen(ND_NB, "--target avx512"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    avx512 (16 float lanes' gen/n.c && grep -c 'schedule:  lanes=16,' gen/n.c"),
                 0, "provenance: %s", out);
    cr_expect_eq(run("grep -c '^#if defined(__AVX512F__)' gen/n.c && grep -c '_mm512_fmadd_ps' gen/n.c"), 0,
                 "no AVX-512 vectors: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -march=x86-64 -fopenmp -Wall -Wextra -Werror -I" HEED_ROOT "/runtime -c gen/n.c -o gen/n.o"),
                 0, "the portable path of an avx512 file: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -march=x86-64 -mavx512f -fopenmp -Wall -Wextra -Werror -I" HEED_ROOT
                     "/runtime -c gen/n.c -o gen/n.o"), 0, "the zmm path of an avx512 file: %s", out);
    cr_assert_eq(run("rm -rf gen"), 0);

    cr_assert_eq(gen(ND_NB, "--target avx2"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    avx2 (8 float lanes' gen/n.c && grep -c 'schedule:  lanes=8,' gen/n.c"),
                 0, "provenance: %s", out);
    cr_expect_eq(run("grep -c '^#if defined(__AVX2__) && defined(__FMA__)' gen/n.c && grep -c '_mm256_fmadd_ps' gen/n.c"),
                 0, "no AVX2 vectors: %s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -march=x86-64 -mavx2 -mfma -fopenmp -Wall -Wextra -Werror -I" HEED_ROOT
                     "/runtime -c gen/n.c -o gen/n.o"), 0, "the ymm path of an avx2 file: %s", out);
    cr_assert_eq(run("rm -rf gen"), 0);

    /* strips wider than the target's vectors: portable vectors of that many lanes */
    cr_assert_eq(gen(ND_NB, "--target avx2 --schedule lanes=32"), 0, "%s", out);
    cr_expect_eq(run("grep -c 'strips of 32 lanes: portable C vectors' gen/n.c"), 0, "provenance: %s", out);
    cr_expect_neq(run("grep -n '_mm\\|immintrin' gen/n.c"), 0, "intrinsics for 32 lanes: %s", out);
    cr_assert_eq(run("rm -rf gen"), 0);

    cr_assert_eq(gen(ND_NB, "--target neon"), 0, "%s", out);
    cr_expect_eq(run("grep -c 'schedule:  lanes=4,' gen/n.c && grep -c 'vfmaq_f32' gen/n.c"), 0, "no NEON vectors: %s", out);
    cr_expect_neq(run("grep -n '_mm\\|immintrin' gen/n.c"), 0, "x86 intrinsics in neon output: %s", out);
    cr_assert_eq(run("rm -rf gen"), 0);

    for (int i = 0; i < 2; i++) {
        cr_assert_eq(gen(i ? ND_PT : ND_NB, "--target scalar"), 0, "%s", out);
        cr_expect_eq(run("grep -c ' \\* target:    scalar' gen/n.c"), 0, "provenance lacks the target: %s", out);
        cr_expect_neq(run("grep -n '_mm\\|immintrin\\|__AVX\\|__m256\\|__m512' gen/n.c"), 0, "intrinsics: %s", out);
        cr_expect_eq(run("cc -std=c11 -O2 -fopenmp -Wall -Wextra -Werror -I" HEED_ROOT "/runtime -c gen/n.c -o gen/n.o"),
                     0, "%s", out);
        cr_assert_eq(run("rm -rf gen"), 0);
    }
    refused(ND_NB, "--target avx9", "--target: unknown target 'avx9'", "allowed: avx512, avx2, neon, scalar");
}

/* heed gen --table: token kernels give heed_kernel_table, N-d kernels
 * heed_nd_table (runtime/ref_nd.h: heed_nd_problem rows, as libheed's N-d
 * plans load them), which compiles and checks against the reference; a list of both
 * kinds is refused before anything is written. */
Test(generator, nd_table)
{
    write_file("p.lua", ND_PT);
    cr_assert_eq(run("sed -i \"s/name = 'n'/name = 'np'/\" p.lua"), 0);
    cr_assert_eq(gen(ND_NB, "p.lua --table gen/t.c"), 0, "%s", out);
    cr_expect_eq(run("grep -c 'const heed_nd_entry heed_nd_table' gen/t.c && grep -c 'call_np' gen/t.c"), 0, "%s", out);
    cr_expect_eq(run("cc -std=c11 -O2 -march=native -fopenmp -Wall -Wextra -Werror -I" HEED_ROOT "/runtime -Igen gen/*.c "
                     HEED_ROOT "/runtime/ref.c " HEED_ROOT "/runtime/ref_nd.c " "-DHEED_CHECK_ND " HEED_ROOT "/tune/check_main.c -lm -o chk"
                     " && ./chk 1 1 | grep -c PASS | grep -qx 2"), 0, "%s", out);
    cr_assert_eq(run("rm -rf gen"), 0);
    write_file("t.lua", "return { name = 't', lq = 5, dk = 4 }");
    refused(ND_NB, "t.lua --table gen/t.c", "--table: t is a token kernel and n an N-d kernel", "heed_problem cannot");
    refused("return { name = 't', lq = 5, dk = 4 }", "p.lua --table gen/t.c", "--table: np is an N-d kernel",
            "a table lists one kind");
}

/* The decode method (gen/algo.lua) reads 16-bit K/V in place: its file has
 * no widening entry point (kernel_f32, widened) and loads with the element
 * type's vector load on every target, where flash with the same storage
 * keeps templates/storage.c's wrapper; its schedule is bk, ksplit, hsums,
 * qacc (the 16-bit defaults: LANES keys' sums reduced together, two
 * accumulators a row, issue 43), pf and pfl (by default pfl=0: L1 or L2 as
 * pf_where, decided at the first call, says; L1 with pfl=1, L2 with pfl=2:
 * the prefetch's locality argument). */
Test(generator, decode_reads_16bit_in_place)
{
    const char *dec = "return { name = 'a', heads = 8, heads_kv = 2, lq = 1, lk = 100, dk = 20, fuse = 'none', dtype = 'f16' }";
    const char *targets[] = { "avx512", "avx2", "neon", "scalar" };
    for (int t = 0; t < 4; t++) {
        char args[64];
        snprintf(args, sizeof args, "--target %s", targets[t]);
        cr_assert_eq(gen(dec, args), 0, "%s", out);
        cr_expect_eq(run("grep -c 'algorithm: decode' gen/a.c"), 0, "%s: not the decode method", targets[t]);
        cr_expect_neq(run("grep -n 'kernel_f32\\|widened(' gen/a.c"), 0, "%s: a widening wrapper: %s", targets[t], out);
        cr_expect_eq(run("grep -c 'vf_load_f16(kj' gen/a.c"), 0, "%s: no in-place f16 load of keys", targets[t]);
        cr_expect_eq(run("grep -c 'schedule:  bk=64,ksplit=2,hsums=1,qacc=2,pf=1,pfl=0,streams=1$' gen/a.c"), 0, "%s: schedule: %s", targets[t], out);
        /* pfl=0: into L1 (locality 3) where pf_where is 3, else L2 (2), decided before the threads start */
        cr_expect_eq(run("grep -A1 'if (atomic_load_explicit(&pf_where, memory_order_relaxed) == 3)$' gen/a.c "
                         "| grep -c '__builtin_prefetch(c + b, 0, 3);$' && grep -A1 '^    else$' gen/a.c "
                         "| grep -c '__builtin_prefetch(c + b, 0, 2);$' && grep -c '^    pf_decide();$' gen/a.c"), 0,
                     "%s: pfl=0 not by pf_where: %s", targets[t], out);
        cr_assert_eq(run("rm -rf gen"), 0);
        for (int l = 1; l <= 2; l++) { /* pfl=1: L1 (prefetcht0), pfl=2: L2 (prefetcht1), and nothing decided */
            snprintf(args, sizeof args, "--target %s --schedule pfl=%d", targets[t], l);
            cr_assert_eq(gen(dec, args), 0, "%s", out);
            char cmd[256];
            snprintf(cmd, sizeof cmd, "grep -c '__builtin_prefetch(c + b, 0, %d)' gen/a.c && ! grep -n 'pf_where\\|0, %d)' gen/a.c",
                     4 - l, l + 1);
            cr_expect_eq(run(cmd), 0, "%s: pfl=%d: %s", targets[t], l, out);
            cr_assert_eq(run("rm -rf gen"), 0);
        }
    }
    cr_assert_eq(gen("return { name = 'a', lq = 17, dk = 4, fuse = 'none', dtype = 'bf16' }", NULL), 0, "%s", out);
    /* (flash converts its tiles as it packs them: no wrapper either) */
    cr_expect_eq(run("grep -c 'algorithm: flash' gen/a.c && ! grep -c 'kernel_f32\\|widened(' gen/a.c"), 0, "%s", out);
    cr_assert_eq(run("rm -rf gen"), 0);
    refused(dec, "--schedule bq=1", "unknown parameter 'bq'", "allowed: bk, ksplit");
}

/* pfl=0 (the default): the first call decides pf_where from the L1D's size,
 * 3 (into L1) where it holds at least 48 KiB, else 2 (L2); checked against
 * the size Linux gives in /sys (skipped where it gives none), and the rule
 * (pf_locality) on both sides of 48 KiB and on an unknown size. */
Test(generator, decode_prefetch_cache_by_the_l1d)
{
    cr_assert_eq(run("for d in /sys/devices/system/cpu/cpu0/cache/index*; do [ \"$(cat $d/level)\" = 1 ] && "
                     "[ \"$(cat $d/type)\" != Instruction ] && cat $d/size; done; true"), 0, "%s", out);
    char *unit;
    const long l1d = strtol(out, &unit, 10) * (*unit == 'K' ? 1024 : *unit == 'M' ? 1024 * 1024 : 1);
    if (l1d <= 0) cr_skip_test("no L1D size in /sys: %s", out);
    cr_assert_eq(gen("return { name = 'a', heads = 4, heads_kv = 2, lq = 1, lk = 300, dk = 20, fuse = 'none', dtype = 'f16' }",
                     "--target scalar"), 0, "%s", out);
    write_file("main.c", "#include \"gen/a.c\"\n#include <stdio.h>\n"
                         "static uint16_t q[4 * 20], k[2 * 300 * 20], v[2 * 300 * 20];\n"
                         "static float o[4 * 20];\n"
                         "int main(void) {\n"
                         "  printf(\"%d%d%d%d%d \", pf_locality(-1), pf_locality(0), pf_locality(32768), pf_locality(49151),\n"
                         "         pf_locality(49152));\n  printf(\"%d \", atomic_load(&pf_where));\n"
                         "  const int rc = a(1, q, k, v, o);\n  printf(\"%d %d\\n\", rc, atomic_load(&pf_where));\n  return 0;\n}\n");
    cr_assert_eq(run("cc -std=c11 -O1 -fopenmp -Wall -Werror main.c -lm -o m && ./m"), 0, "%s", out);
    char want[32];
    snprintf(want, sizeof want, "22223 0 0 %d\n", l1d >= 48 * 1024 ? 3 : 2);
    cr_expect_str_eq(out, want, "L1D %ld bytes: the rule, pf_where before, the call's status, after: %s", l1d, out);
}

/* The target is a schedule parameter: --schedule target=T writes what
 * --target T writes (but the command line), agrees with a --target naming
 * the same and is refused against another, or when T is no target; the N-d
 * forms take it as token specs do. */
Test(generator, target_in_the_schedule)
{
    /* (17 queries: flash, whose schedule has bq; 5 would be the decode method's) */
    const char *src = "return { name = 'a', lq = 17, dk = 4, heads = 2, fuse = 'none', mask = 'causal' }";
    cr_assert_eq(gen(src, "--schedule target=scalar,bq=8"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    scalar' gen/a.c"), 0, "provenance lacks the target: %s", out);
    cr_expect_eq(run("grep -c -- '--schedule target=scalar,bq=8' gen/a.c"), 0, "command lacks the schedule: %s", out);
    cr_assert_eq(run("mv gen sched && " HEED_ROOT "/heed gen s.lua -o gen --target scalar --schedule bq=8"), 0, "%s", out);
    cr_expect_eq(run("diff sched/a.c gen/a.c | grep '^[<>]' | grep -v ' \\* command: ' | grep -c ."), 1,
                 "--schedule target=scalar and --target scalar differ beyond the command line: %s", out);
    cr_assert_eq(run("rm -rf gen sched"), 0);
    cr_expect_eq(gen(src, "--schedule target=scalar,bq=8 --target scalar"), 0, "the same target twice: %s", out);
    cr_assert_eq(run("rm -rf gen"), 0);
    refused(src, "--schedule target=scalar,bq=8 --target avx2",
            "--schedule target=scalar conflicts with --target avx2", "give one of them");
    refused(src, "--schedule target=avx9", "--schedule: target=avx9 is not a target", "allowed: avx512, avx2, neon, scalar");
    cr_assert_eq(gen("return { name = 'n', form = 'neighborhood', map = { 9 }, kernel = 3, dk = 4 }",
                     "--schedule target=avx2,lanes=8"), 0, "%s", out);
    cr_expect_eq(run("grep -c ' \\* target:    avx2 (8 float lanes' gen/n.c"), 0, "provenance lacks the target: %s", out);
    cr_assert_eq(run("rm -rf gen"), 0);
    /* --schedule help lists the targets */
    cr_assert_eq(gen(src, "--schedule help"), 0, "%s", out);
    cr_expect(strstr(out, "\n  target   ") && strstr(out, "avx2, neon, scalar; default") && strstr(out, "heed tune searches"),
              "%s", out);
}

/* vf_exp2 and vf_exp of each x86 row and the portable path, called from a
 * driver that includes the generated file: relative error at most 5e-7 over
 * [-126, 127] (and e^x over [-87, 88]), 2^x exactly 0 below -126.5 and at
 * -inf, NaN kept, +inf above 2^128. Each build runs where this CPU has its
 * instructions: the avx512 file with DQ (vreduceps), without it (roundscale),
 * the avx2 file, and the avx512 file's portable path. */
#define EXP_DRIVER                                                                                            \
    "#include \"gen/a.c\"\n"                                                                                  \
    "#include <stdio.h>\n"                                                                                    \
    "static float x[LANES], y[LANES];\n"                                                                      \
    "static void apply(int e) { vf_store(y, e ? vf_exp(vf_load(x)) : vf_exp2(vf_load(x))); }\n"               \
    "int main(void) {\n"                                                                                      \
    "  double worst[2] = { 0, 0 }; int bad = 0;\n"                                                            \
    "  for (int e = 0; e < 2; e++) {\n"                                                                       \
    "    const double lo = e ? -87.0 : -126.0, hi = e ? 88.0 : 127.0;\n"                                      \
    "    for (long i = 0; i < 2000000; i += LANES) {\n"                                                       \
    "      for (int t = 0; t < LANES; t++) x[t] = (float)(lo + (hi - lo) * (double)(i + t) / 2000000.0);\n"   \
    "      apply(e);\n"                                                                                       \
    "      for (int t = 0; t < LANES; t++) {\n"                                                               \
    "        const double r = e ? exp((double)x[t]) : exp2((double)x[t]), d = fabs(y[t] - r) / r;\n"          \
    "        if (!(d <= worst[e])) worst[e] = d;\n"                                                           \
    "      }\n"                                                                                               \
    "    }\n"                                                                                                 \
    "  }\n"                                                                                                   \
    "  const float sp[6] = { -INFINITY, -126.6f, -1000.0f, NAN, 128.5f, INFINITY };\n"                        \
    "  for (int t = 0; t < LANES; t++) x[t] = sp[t % 6];\n"                                                   \
    "  apply(0);\n"                                                                                           \
    "  for (int t = 0; t < 6 && t < LANES; t++) {\n"                                                          \
    "    const int ok = t < 3 ? y[t] == 0.0f : t == 3 ? y[t] != y[t] : y[t] == INFINITY || (t == 5 && y[t] != y[t]);\n" \
    "    if (!ok) { printf(\"exp2(%g) = %g\\n\", sp[t], y[t]); bad = 1; }\n"                                 \
    "  }\n"                                                                                                   \
    "  printf(\"worst relative error: exp2 %.3g, exp %.3g\\n\", worst[0], worst[1]);\n"                      \
    "  return bad || !(worst[0] <= 5e-7) || !(worst[1] <= 5e-7);\n"                                           \
    "}\n"

Test(generator, exp_primitives_per_row, .timeout = 180)
{
    const char *src = "return { name = 'a', lq = 17, dk = 4, heads = 2, fuse = 'none', "
                      "mask = { kind = 'local', radius = 5, gaussian = true } }";
    write_file("d.c", EXP_DRIVER);
    __builtin_cpu_init();
    const struct {
        const char *target, *flags;
        int runs;
    } builds[] = {
        { "avx512", "-mavx512f -mavx512dq", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") },
        { "avx512", "-mavx512f -mno-avx512dq", __builtin_cpu_supports("avx512f") },
        { "avx2", "-mavx2 -mfma", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") },
        { "avx512", "", 1 },
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++) {
        if (!builds[i].runs) continue;
        char args[64], cmd[512];
        snprintf(args, sizeof args, "--target %s", builds[i].target);
        cr_assert_eq(gen(src, args), 0, "%s", out);
        cr_assert_eq(run("grep -c 'vf_exp2(vf x)' gen/a.c && grep -c 'vf_exp(vf x)' gen/a.c"), 0,
                     "the %s file lacks vf_exp2 or vf_exp: %s", builds[i].target, out);
        snprintf(cmd, sizeof cmd,
                 "cc -std=c11 -O2 -march=x86-64 %s -fopenmp -Wall -Wextra -Werror -Wno-unused-function -I" HEED_ROOT
                 "/runtime d.c -o d -lm && ./d",
                 builds[i].flags);
        cr_expect_eq(run(cmd), 0, "%s %s: %s", builds[i].target, builds[i].flags, out);
        cr_assert_eq(run("rm -rf gen d"), 0);
        ran++;
    }
    cr_expect_geq(ran, 1);
}
