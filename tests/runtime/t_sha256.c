/* t_sha256.c — sha256.c: SHA-256 against known vectors and sha256sum. */
#include "rt_common.h"

/* ---- SHA-256 ---------------------------------------------------------------------- */

Test(sha256, known_vectors)
{
    char hex[65];
    heed_sha256_hex("", 0, hex);
    cr_expect_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    heed_sha256_hex("abc", 3, hex);
    cr_expect_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    heed_sha256_hex(m448, strlen(m448), hex);
    cr_expect_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    heed_sha256_hex(m896, strlen(m896), hex);
    cr_expect_str_eq(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* a million 'a', streamed in uneven pieces */
    static char a[1000000];
    memset(a, 'a', sizeof a);
    hrt_sha256 c;
    hrt_sha256_init(&c);
    for (size_t off = 0, step = 1; off < sizeof a; off += step, step = step * 3 % 1000 + 1)
        hrt_sha256_update(&c, a + off, off + step > sizeof a ? sizeof a - off : step);
    unsigned char d[32];
    hrt_sha256_final(&c, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    cr_expect_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* every length around the block and padding edges, one-shot vs byte by byte */
    for (size_t n = 0; n < 200; n++) {
        char one[65], two[65];
        heed_sha256_hex(a, n, one);
        hrt_sha256_init(&c);
        for (size_t i = 0; i < n; i++) hrt_sha256_update(&c, a + i, 1);
        hrt_sha256_final(&c, d);
        for (int i = 0; i < 32; i++) snprintf(two + 2 * i, 3, "%02x", d[i]);
        cr_expect_str_eq(one, two, "length %zu", n);
    }
}

Test(sha256, matches_sha256sum)
{
    new_cache();
    char path[512], cmd[1024], want[80] = "";
    snprintf(path, sizeof path, "%s/blob", g_cache);
    size_t n = 100003;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (char)(i * 2654435761u >> 13);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p && fgets(want, sizeof want, p));
    pclose(p);
    want[64] = '\0';
    char hex[65];
    heed_sha256_hex(data, n, hex);
    cr_expect_str_eq(hex, want);
    free(data);
    rm_cache();
}
