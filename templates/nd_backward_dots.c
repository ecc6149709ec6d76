/* The rest of a row past its whole vectors, in scalar C: x · r over
 * channels [nv, n). */
static inline float ndb_rest(const float *restrict x, const float *restrict r, int nv, int n)
{
    float s = 0.0f;
    for (int c = nv; c < n; c++) s += x[c] * r[c];
    return s;
}

/* out[t] = x · rows[list[t] * n] (n floats) for t < nl, and 0 up to the
 * next whole vector: four rows at a time, their channel sums four
 * independent chains of vectors (one x vector feeds four multiply-adds). */
static void ndb_dots(const float *restrict x, const float *restrict rows, int n, const int *list, int nl, float *out)
{
    const int nv = n / LANES * LANES;
    int t = 0;
    for (; t + 4 <= nl; t += 4) {
        const float *r0 = rows + (size_t)list[t] * n, *r1 = rows + (size_t)list[t + 1] * n;
        const float *r2 = rows + (size_t)list[t + 2] * n, *r3 = rows + (size_t)list[t + 3] * n;
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        for (int c = 0; c < nv; c += LANES) {
            const vf xc = vf_load(x + c);
            a0 = vf_fma(xc, vf_load(r0 + c), a0), a1 = vf_fma(xc, vf_load(r1 + c), a1);
            a2 = vf_fma(xc, vf_load(r2 + c), a2), a3 = vf_fma(xc, vf_load(r3 + c), a3);
        }
        out[t] = vf_hsum(a0) + ndb_rest(x, r0, nv, n), out[t + 1] = vf_hsum(a1) + ndb_rest(x, r1, nv, n);
        out[t + 2] = vf_hsum(a2) + ndb_rest(x, r2, nv, n), out[t + 3] = vf_hsum(a3) + ndb_rest(x, r3, nv, n);
    }
    for (; t < nl; t++) {
        const float *r = rows + (size_t)list[t] * n;
        vf a = vf_zero();
        for (int c = 0; c < nv; c += LANES) a = vf_fma(vf_load(x + c), vf_load(r + c), a);
        out[t] = vf_hsum(a) + ndb_rest(x, r, nv, n);
    }
    for (; t % LANES; t++) out[t] = 0.0f;
}
