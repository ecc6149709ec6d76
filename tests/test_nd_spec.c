/* test_nd_spec.c — the CLI's handling of N-d specs: every form accepted,
 * bad ones refused with exit 2 naming the field and the allowed values,
 * canonical hashes, the header's signature. Linked into build/test_spec
 * (the spec/CLI suites, the Makefile's SPEC_TESTS); the N-d kernels
 * themselves are tests/test_nd.c's. */
#define _POSIX_C_SOURCE 200809L
#include "cli_common.h"

TestSuite(nd_spec, .init = setup, .fini = teardown, .timeout = 60);

/* heed gen accepts each spec of good (named 'a'): gen/a.c and gen/a.h written. */
static void accepts(const char *const *good, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(gen(good[i], NULL), 0, "%s: %s", good[i], out);
        cr_expect(exists("gen/a.c") && exists("gen/a.h"), "%s", good[i]);
        run("rm -rf gen");
    }
}
#define ACCEPTS(good) accepts(good, sizeof good / sizeof *good)

#define NB "name = 'a', form = 'neighborhood', map = {9, 9}, kernel = 3, dk = 4"
#define PT "name = 'a', form = 'patches', channels = 3, map = {8, 8}, window = 4"

Test(nd_spec, accepts_every_form)
{
    const char *good[] = {
        "return { " NB " }",
        "return { " NB ", dilation = {1, 2}, bias = { kind = 'relative', clip = {2, 3} }, fuse = 'none' }",
        "return { " PT ", stride = {2, 3}, f_q = { kind = 'linear', out = 6 }, f_k = { kind = 'linear', out = 6 }, g_v = 'flat' }",
        "return { name = 'a', form = 'collection', channels = 2, map = {3, 3}, count = 5, heads = 2 }",
        "return { name = 'a', form = 'halo', map = {8, 8}, block = 4, halo = 1, padding = 'clamp', dk = 4 }",
        "return { name = 'a', form = 'neighborhood', map = {5, 6, 7}, kernel = {3, 3, 3}, dk = 4, score = 'cosine' }",
    };
    ACCEPTS(good);
}

/* Storage types on every form, grouped K/V heads on the windowed ones. */
Test(nd_spec, storage_types_and_grouped_heads)
{
    const char *good[] = {
        "return { " NB ", dtype = 'bf16' }",
        "return { " NB ", heads = 4, heads_kv = 2, dtype = 'f16', out_dtype = 'bf16' }",
        "return { " PT ", dtype = 'f16', out_dtype = 'f16' }",
        "return { name = 'a', form = 'collection', channels = 2, map = {3, 3}, count = 5, out_dtype = 'bf16' }",
        "return { name = 'a', form = 'halo', map = {8, 8}, block = 4, halo = 1, dk = 4, heads = 3, heads_kv = 1, dtype = 'bf16' }",
    };
    ACCEPTS(good);
    static const refusal bad[] = {
        { "return { " NB ", dtype = 'f64' }", "field 'dtype'", "allowed: f32, bf16, f16" },
        { "return { " PT ", out_dtype = 'half' }", "field 'out_dtype'", "allowed: f32, bf16, f16" },
        { "return { " NB ", dtype = 16 }", "field 'dtype'", "allowed: f32, bf16, f16" },
        { "return { " NB ", heads = 4, heads_kv = 3 }", "field 'heads_kv'", "divisor of heads: 1, 2, 4" },
        { "return { " NB ", heads_kv = 0 }", "field 'heads_kv'", "out of range" },
        { "return { " PT ", heads_kv = 1 }", "field 'heads_kv'", "allowed for neighborhood and halo" },
        { "return { name = 'a', form = 'collection', channels = 2, map = {3}, count = 4, heads_kv = 1 }",
          "field 'heads_kv'", "the same heads" },
    };
    REFUSES(bad);
}

/* heed check on 16-bit N-d specs (and grouped K/V heads): the kernel,
 * through its table adapter, against the reference on rounded inputs. */
Test(nd_spec, check_takes_storage_types, .timeout = 180)
{
    const char *specs[] = {
        "return { name = 'a', form = 'halo', map = {9, 7}, block = 3, halo = 1, dk = 5, heads = 4, heads_kv = 2,"
        " dtype = 'bf16', out_dtype = 'f16', fuse = 'none' }",
        "return { " PT ", dtype = 'f16', out_dtype = 'bf16', f_v = 'linear', fuse = 'sum' }",
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        char path[512], cmd[1024];
        snprintf(path, sizeof path, "%s/s.lua", dir);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fputs(specs[i], f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "%s/heed check s.lua", HEED_ROOT);
        cr_expect_eq(run(cmd), 0, "%s: %s", specs[i], out);
        cr_expect(strstr(out, ": PASS") != NULL, "%s: %s", specs[i], out);
    }
}

Test(nd_spec, bad_forms_and_fields)
{
    static const refusal bad[] = {
        { "return { name = 'a', form = 'blocks', map = {4} }",
          "field 'form'", "patches, collection, neighborhood, halo" },
        { "return { " NB ", lq = 5 }", "unknown field \"lq\"", "allowed: name, form, heads, map, kernel" },
        { "return { " NB ", mask = 'causal' }", "unknown field \"mask\"", "neighborhood" },
        { "return { " PT ", kernel = 3 }", "unknown field \"kernel\"", "window, stride" },
        { "return { name = 'a', form = 'neighborhood', kernel = 3, dk = 4 }",
          "field 'map' is required", "list of 1 to 3 integers" },
        { "return { name = 'a', form = 'neighborhood', map = {4}, dk = 4 }", "field 'kernel' is required", NULL },
        { "return { name = 'a', form = 'neighborhood', map = {4}, kernel = 3 }", "field 'dk' is required", NULL },
        { "return { name = 'a', form = 'patches', map = {4}, window = 2 }", "field 'channels' is required", NULL },
        { "return { name = 'a', form = 'halo', map = {4}, dk = 2 }", "field 'block' is required", NULL },
    };
    REFUSES(bad);
}

Test(nd_spec, bad_shapes_name_the_allowed_values)
{
    static const refusal bad[] = {
        { "return { name = 'a', form = 'neighborhood', map = {}, kernel = 1, dk = 4 }",
          "field 'map'", "list of 1 to 3 integers" },
        { "return { name = 'a', form = 'neighborhood', map = {4, 4, 4, 4}, kernel = 1, dk = 4 }",
          "field 'map'", "1 to 3" },
        { "return { name = 'a', form = 'neighborhood', map = {4, 0}, kernel = 1, dk = 4 }", "field 'map'", NULL },
        { "return { name = 'a', form = 'neighborhood', map = {4, 4.5}, kernel = 1, dk = 4 }", "field 'map'", NULL },
        { "return { " NB ", kernel = {3, 3, 3} }", "field 'kernel'", "one per dimension of map" },
        { "return { " NB ", kernel = 0 }", "field 'kernel'", "integer 1.." },
        { "return { " NB ", kernel = 5, dilation = 2 }", "field 'kernel'", "kernel * dilation <= map" },
        { "return { " NB ", dilation = -1 }", "field 'dilation'", "integer 1.." },
        { "return { " PT ", window = 9 }", "field 'window'", "window <= map" },
        { "return { " PT ", stride = 0 }", "field 'stride'", "integer 1.." },
        { "return { name = 'a', form = 'halo', map = {8}, block = 0, dk = 4 }", "field 'block'", "1.." },
        { "return { name = 'a', form = 'halo', map = {8}, block = 2, halo = -1, dk = 4 }", "field 'halo'", "0.." },
        { "return { name = 'a', form = 'halo', map = {8}, block = 2, padding = 'reflect', dk = 4 }",
          "field 'padding'", "zero, clamp" },
        { "return { name = 'a', form = 'collection', channels = 2, map = {3}, count = 0 }", "field 'count'", "1.." },
    };
    REFUSES(bad);
}

Test(nd_spec, bad_choices_name_the_allowed_values)
{
    static const refusal bad[] = {
        { "return { " PT ", f_q = 'conv' }", "field 'f_q'", "identity, linear" },
        { "return { " PT ", f_v = { kind = 'linear', out = 0 } }", "field 'f_v.out'", "1.." },
        { "return { " PT ", f_k = { kind = 'linear', width = 3 } }", "field 'f_k.width'", "kind, out" },
        { "return { " PT ", f_q = { kind = 'linear', out = 4 } }", "field 'f_k'", "same number of output channels" },
        { "return { " PT ", heads = 2 }", "field 'heads'", "divisor" },
        { "return { " PT ", g_v = 'unfold' }", "field 'g_v'", "fold, flat" },
        { "return { " NB ", score = 'location' }", "field 'score'", "dot, scaled_dot, general, additive, cosine" },
        { "return { " NB ", bias = 'relative' }", "field 'bias.clip' is required", NULL },
        { "return { " NB ", bias = { kind = 'absolute', clip = 2 } }", "field 'bias'", "relative" },
        { "return { " NB ", bias = { kind = 'relative', clip = {1, 2, 3} } }",
          "field 'bias.clip'", "one per dimension" },
        { "return { " NB ", bias = { kind = 'relative', clip = 2, scale = 1 } }", "field 'bias.scale'", "kind, clip" },
        { "return { " PT ", mask = { kind = 'local' } }", "mask.radius", "required" },
        { "return { " NB ", norm = 'softmx' }", "field 'norm'", "softmax, sigmoid, relu, none" },
        { "return { " NB ", da = 3 }", "field 'da'", "additive" },
    };
    REFUSES(bad);
}

/* Swin's fields (issue 42): accepted, and refused naming the field and the
 * allowed values. */
#define SW "name = 'a', form = 'halo', map = {14, 14}, block = 7, dk = 4, fuse = 'none'"
Test(nd_spec, swin_fields)
{
    const char *good[] = {
        "return { " SW ", shift = {3, 3}, bias = { kind = 'relative_joint', clip = {6, 6} } }",
        "return { " SW ", block = {7, 2}, bias = { kind = 'relative_joint', clip = 6 } }",
        "return { " SW ", halo = 1, block = {7, 4}, padding = 'clamp', bias = { kind = 'relative', clip = 2 } }",
    };
    ACCEPTS(good);
    static const refusal bad[] = {
        { "return { " SW ", shift = {3, 3}, halo = 1 }", "field 'shift'", "halo = 0" },
        { "return { " SW ", shift = {7, 3} }", "field 'shift'", "0..block-1" },
        { "return { " SW ", shift = {3, 3, 3} }", "field 'shift'", "one per dimension" },
        { "return { " SW ", map = {15, 14}, shift = 3 }", "field 'shift'", "multiple of block" },
        { "return { " SW ", block = {7, 7, 7} }", "field 'block'", "one per dimension" },
        { "return { " SW ", shift = 3, fuse = 'mean' }", "field 'fuse'", "allowed: none" },
        { "return { " SW ", shift = 3, score = 'cosine' }", "field 'score'", "allowed: dot, scaled_dot" },
        { "return { " SW ", bias = { kind = 'relative_jiont', clip = 6 } }", "field 'bias'", "relative_joint" },
        { "return { " SW ", bias = { kind = 'relative_joint' } }", "field 'bias.clip' is required", NULL },
        { "return { " SW ", bias = { kind = 'relative_joint', clip = {6, 6}, size = 169 } }",
          "field 'bias.size'", "kind, clip" },
        { "return { " NB ", bias = { kind = 'relative_joint', clip = 2 } }", "field 'bias'", "halo form only" },
    };
    REFUSES(bad);
}

/* Swin-T stage 1's shifted block (issue 42's target): the window kernel
 * (templates/nd_windows.c) is vectorized on every target: softmax with the
 * vector exp (no expf), and the bias and region mask come from an additive
 * table built per head and window class (4 classes on a 56 x 56 map shifted
 * by 3: a window is last or not per dimension), not gathered per score in
 * the window loop. */
Test(nd_spec, swin_kernel_is_vectorized)
{
    const char *targets[] = { "avx512", "avx2", "scalar" };
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        char args[64];
        snprintf(args, sizeof args, "--target %s", targets[i]);
        cr_assert_eq(gen("return { name = 'a', form = 'halo', map = {56, 56}, block = 7, shift = {3, 3}, heads = 3, dk = 32, "
                         "score = 'scaled_dot', fuse = 'none', bias = { kind = 'relative_joint', clip = {6, 6} } }", args),
                     0, "%s: %s", targets[i], out);
        cr_expect_neq(run("grep -n 'expf(' gen/a.c | grep -v -- '-87.0f'"), 0, "%s: the window kernel calls expf: %s", targets[i], out);
        cr_expect_eq(run("grep -q 'vf_exp(vf_load(d))' gen/a.c"), 0, "%s: no vector exp in the softmax", targets[i]);
        cr_expect_eq(run("grep -q 'NCLS = 4,' gen/a.c"), 0, "%s: not 4 window classes", targets[i]);
        cr_expect_neq(run("sed -n '/^static void attend_window/,/^}/p' gen/a.c | grep -n 'bias(\\|-100'"), 0,
                      "%s: the window loop computes the bias or mask per score: %s", targets[i], out);
        run("rm -rf gen");
    }
}

Test(nd_spec, canonical_hash_ignores_spelling)
{
    char a[64], b[64], c[64], d[64], e[64];
    hash_of("return { " NB " }", a);
    hash_of("return { dk = 4, kernel = {3, 3}, map = {9, 9}, dilation = {1, 1}, form = 'neighborhood', name = 'a',"
            " heads = 1, dv = 4, fuse = 'mean', bias = 'none', score = { kind = 'scaled_dot' }, scale = 0.5 }", b);
    hash_of("return { " NB ", dilation = {1, 2} }", c);
    hash_of("return { " PT " }", d);
    hash_of("return { " PT ", stride = {4, 4}, f_q = 'identity', g_v = 'fold' }", e);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c);
    cr_expect_str_eq(d, e);
    cr_expect_str_neq(a, d);
    /* the storage fields and heads_kv at their defaults hash as left out
     * (f32 hashes did not change when they came); other values hash apart */
    char f[64], g[64], h[64], i[64], j[64], k[64];
    hash_of("return { " NB ", dtype = 'f32', out_dtype = 'f32', heads_kv = 1 }", f);
    hash_of("return { " NB ", dtype = 'bf16' }", g);
    hash_of("return { " NB ", dtype = 'f16' }", h);
    hash_of("return { " NB ", out_dtype = 'bf16' }", i);
    hash_of("return { " NB ", heads = 2 }", j);
    hash_of("return { " NB ", heads = 2, heads_kv = 1 }", k);
    cr_expect_str_eq(a, f);
    cr_expect_str_neq(a, g);
    cr_expect_str_neq(g, h);
    cr_expect_str_neq(a, i);
    cr_expect_str_neq(g, i);
    cr_expect_str_neq(j, k);
    /* a square block as a list, a zero shift: as left out; the Swin fields hash apart */
    char l[64], m[64], n[64], o[64], r[64];
    hash_of("return { " SW " }", l);
    hash_of("return { " SW ", block = {7, 7}, shift = {0, 0} }", m);
    hash_of("return { " SW ", shift = {3, 3} }", n);
    hash_of("return { " SW ", block = {7, 2} }", o);
    hash_of("return { " SW ", bias = { kind = 'relative_joint', clip = 6 } }", r);
    cr_expect_str_eq(l, m);
    cr_expect_str_neq(l, n);
    cr_expect_str_neq(l, o);
    cr_expect_str_neq(l, r);
}

Test(nd_spec, header_documents_the_signature)
{
    cr_assert_eq(gen("return { " PT ", f_v = { kind = 'linear', out = 5 }, fuse = 'none' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const float \\*x, float \\*out, const a_params \\*p);' gen/a.h"), 0);
    cr_expect_eq(run("grep -q 'const float \\*f_v; /\\* \\[5\\]\\[3\\]' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'x   \\[batch\\]\\[3\\]\\[8\\]\\[8\\]' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'generated by heed' gen/a.c"), 0);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'none' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const float \\*q, const float \\*k, const float \\*v, float \\*out);' "
                     "gen/a.h"),
                 0);
    run("rm -rf gen");
    /* 16-bit storage: uint16_t bit patterns, said so; grouped K/V heads in k's and v's shapes */
    cr_assert_eq(gen("return { " PT ", dtype = 'bf16', out_dtype = 'f16' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const uint16_t \\*x, uint16_t \\*out);' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'x bfloat16 bit patterns (uint16_t); out IEEE binary16 bit patterns' gen/a.h"), 0, "%s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", heads = 4, heads_kv = 2, dtype = 'f16', fuse = 'none' }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const uint16_t \\*q, const uint16_t \\*k, const uint16_t \\*v, "
                     "float \\*out);' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'k   \\[batch\\]\\[2\\]\\[81\\]\\[4\\]' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'q   \\[batch\\]\\[4\\]\\[81\\]\\[4\\]' gen/a.h"), 0, "%s", out);
}

/* NATTEN's stride and is_causal on the neighborhood form (docs/nd-forms.md):
 * per dimension, checked with errors naming the field and what is allowed;
 * at their defaults they hash as left out (older hashes stay), otherwise
 * apart; the canonical text names them. */
Test(nd_spec, natten_stride_and_causal)
{
    const char *good[] = {
        "return { " NB ", stride = 2, causal = true, fuse = 'none' }",
        "return { " NB ", stride = {3, 1}, causal = {false, true}, dilation = {2, 1} }",
        "return { name = 'a', form = 'neighborhood', map = {5, 6, 7}, kernel = {3, 2, 3}, stride = {1, 2, 3},"
        " causal = {true, false, true}, dk = 4 }",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cr_expect_eq(gen(good[i], NULL), 0, "%s: %s", good[i], out);
        cr_expect(exists("gen/a.c") && exists("gen/a.h"), "%s", good[i]);
        run("rm -rf gen");
    }
    refused("return { " NB ", stride = 4 }", NULL, "field 'stride'", "allowed: 1..kernel");
    refused("return { " NB ", stride = {1, 0} }", NULL, "field 'stride'", "1..kernel");
    refused("return { " NB ", stride = 'big' }", NULL, "field 'stride'", "a list of 2 such");
    refused("return { " NB ", causal = 1 }", NULL, "field 'causal'", "allowed: true, false, or a list of 2 booleans");
    refused("return { " NB ", causal = {true} }", NULL, "field 'causal'", "one per dimension of map");
    refused("return { " NB ", causal = {true, 'no'} }", NULL, "field 'causal'", "booleans");
    refused("return { name = 'a', form = 'halo', map = {8, 8}, block = 4, dk = 4, causal = true }", NULL,
            "unknown field \"causal\"", "allowed: name, form");
    refused("return { " PT ", causal = true }", NULL, "unknown field \"causal\"", "allowed: name, form");
    char a[64], b[64], c[64], d[64], e[64], f[64];
    hash_of("return { " NB " }", a);
    hash_of("return { " NB ", stride = {1, 1}, causal = {false, false} }", b);
    hash_of("return { " NB ", stride = {1, 2} }", c);
    hash_of("return { " NB ", causal = {false, true} }", d);
    hash_of("return { " NB ", causal = {true, false} }", e);
    hash_of("return { " NB ", stride = {1, 2}, causal = {false, true} }", f);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c);
    cr_expect_str_neq(a, d);
    cr_expect_str_neq(d, e);
    cr_expect_str_neq(c, f);
    cr_expect_str_neq(d, f);
    cr_assert_eq(gen("return { " NB ", stride = {1, 2}, causal = {false, true} }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'kernel=3x3;dilation=1x1;stride=1x2;causal=0x1;dk=4' gen/a.c"), 0, "%s", out);
}

/* backward = true (docs/backward.md, "N-d forms"): the neighborhood form
 * with every score (additive: W_q, W_k, v_a's gradients in NAME_grads) and
 * fuse, the halo with dot or scaled_dot and every fuse, float32 (patches and
 * collection: fuse none, mean, sum and max, the Gaussian window too) gets NAME_backward (and
 * --backward sets it; with a relative bias it takes NAME_params and
 * NAME_grads, the tables' gradients); everything else is refused naming
 * the field (heed bench --pass backward times it: tests/test_bench.c's
 * bench_nd_backward_pass). The canonical text does not
 * hold it (the forward is the same). */
Test(nd_spec, backward_field)
{
    cr_assert_eq(gen("return { " NB ", fuse = 'none', causal = {false, true}, stride = {2, 1}, backward = true }",
                     NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch' gen/a.h && grep -q 'int a_backward(int batch' gen/a.c"), 0,
                 "%s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'none' }", "--backward"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch' gen/a.h"), 0, "--backward: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'none', backward = false }", NULL), 0, "%s", out);
    cr_expect_neq(run("grep -q '_backward' gen/a.h"), 0, "backward = false: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'none', bias = { kind = 'relative', clip = 1 }, backward = true }", NULL),
                 0, "%s", out);
    cr_expect_eq(run("grep -q 'typedef struct a_grads' gen/a.h && grep -q 'const a_params \\*p, a_grads \\*g);' gen/a.h"),
                 0, "bias: %s", out);
    run("rm -rf gen");
    /* general: W's gradient in a_grads */
    cr_assert_eq(gen("return { " NB ", fuse = 'none', score = 'general', backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'float \\*w; ' gen/a.h && grep -q 'const a_params \\*p, a_grads \\*g);' gen/a.h"), 0,
                 "general: %s", out);
    run("rm -rf gen");
    /* 16-bit storage: q, k, v and their gradients of the dtype, out and dout of the out_dtype */
    cr_assert_eq(gen("return { " NB ", fuse = 'none', dtype = 'bf16', out_dtype = 'f16', backward = true }", NULL), 0,
                 "%s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch, const uint16_t \\*q, const uint16_t \\*k, const uint16_t \\*v, "
                     "const uint16_t \\*out,' gen/a.h"), 0, "16-bit: %s", out);
    run("rm -rf gen");
    /* patches (docs/backward.md, "Patches and collection"): x in, dx out, the map's gradient in NAME_grads */
    cr_assert_eq(gen("return { " PT ", f_q = 'linear', fuse = 'mean', backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch, const float \\*x, const float \\*out' gen/a.h && "
                     "grep -q 'typedef struct a_grads' gen/a.h"), 0, "patches: %s", out);
    run("rm -rf gen");
    /* patches in 16-bit storage: x and dx of the dtype, out and dout of the out_dtype */
    cr_assert_eq(gen("return { " PT ", f_q = 'linear', fuse = 'mean', dtype = 'bf16', out_dtype = 'f16', backward = true }",
                     NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch, const uint16_t \\*x, const uint16_t \\*out, const uint16_t "
                     "\\*dout, const float \\*lse,' gen/a.h && grep -q 'uint16_t \\*dx,' gen/a.h"), 0, "patches 16-bit: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " PT ", fuse = 'max', mask = { kind = 'local', radius = 2, gaussian = true }, "
                     "backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'static inline float ndx_gw' gen/a.c && grep -q 'sc->am\\[j\\] == i' gen/a.c"), 0,
                 "patches, fuse max, Gaussian: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'max', backward = true }", NULL), 0, "fused: %s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch' gen/a.h"), 0, "fused: %s", out);
    run("rm -rf gen");
    /* additive: W_q's, W_k's and v_a's gradients in a_grads; fused cosine; the halo's fused forms */
    cr_assert_eq(gen("return { " NB ", fuse = 'sum', score = 'additive', da = 4, backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'float \\*w_q; ' gen/a.h && grep -q 'float \\*v_a; ' gen/a.h && "
                     "grep -q 'const a_params \\*p, a_grads \\*g);' gen/a.h"), 0, "additive: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'max', score = 'cosine', backward = true }", NULL), 0, "%s", out);
    run("rm -rf gen");
    /* 16-bit with the other scores and fused (their float passes behind ndb_wide; dot fused a slice at a time) */
    cr_assert_eq(gen("return { " NB ", fuse = 'none', score = 'additive', da = 4, dtype = 'f16', backward = true }",
                     NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'static int ndb_wide(int batch, const uint16_t \\*q' gen/a.c"), 0, "additive f16: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", score = 'cosine', dtype = 'bf16', backward = true }", NULL), 0, "%s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'max', out_dtype = 'bf16', backward = true }", NULL), 0, "%s", out);
    cr_expect_eq(run("grep -q 'const uint16_t \\*out,' gen/a.h"), 0, "dot max, out bf16: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { name = 'a', form = 'halo', map = {8, 8}, block = 4, dk = 4, fuse = 'mean', backward = true }",
                     NULL), 0, "halo fused: %s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch' gen/a.h"), 0, "halo fused: %s", out);
    run("rm -rf gen");
    /* the halo's other scores (additive: its weights' gradients) and 16-bit storage, fused too */
    cr_assert_eq(gen("return { name = 'a', form = 'halo', map = {8, 8}, block = 4, dk = 4, score = 'additive', da = 3, "
                     "backward = true }", NULL), 0, "halo additive: %s", out);
    cr_expect_eq(run("grep -q 'float \\*w_q; ' gen/a.h && grep -q 'const a_params \\*p, a_grads \\*g);' gen/a.h"), 0,
                 "halo additive: %s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { name = 'a', form = 'halo', map = {8, 8}, block = 4, dk = 4, score = 'cosine', fuse = 'max', "
                     "dtype = 'bf16', backward = true }", NULL), 0, "halo bf16: %s", out);
    cr_expect_eq(run("grep -q 'int a_backward(int batch, const uint16_t \\*q' gen/a.h"), 0, "halo bf16: %s", out);
    run("rm -rf gen");
    static const refusal bad[] = {
        { "return { " NB ", fuse = 'none', backward = 1 }", "field 'backward'", "allowed: true, false" },
        { "return { " PT ", score = 'cosine', backward = true }", "field 'backward'", "with score = \"cosine\"" },
    };
    REFUSES(bad);
    char a[64], b[64];
    hash_of("return { " NB ", fuse = 'none' }", a);
    hash_of("return { " NB ", fuse = 'none', backward = true }", b);
    cr_expect_str_eq(a, b);
}
