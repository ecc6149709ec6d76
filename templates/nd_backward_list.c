/* The pixels of the product of pixel t's ranges (start[o + x], count[o + x],
 * dilation apart) over the first nd dimensions (t: a pixel of those),
 * row-major, into list; returns how many. With place (the queries of key t:
 * start, count = ndb_qs, ndb_qn), place[e] is t's index in the window of
 * query list[e] over those dimensions (row-major, as ndb_ks, ndb_kn list
 * that window). */
static int ndb_list_nd(int t, int nd, const int *start, const int *count, int *list, int *place)
{
    int x[NDB_NDIM] = { 0 }, n = 1;
    for (int d = nd - 1; d >= 0; d--) {
        x[d] = t % ndb_w[d];
        t /= ndb_w[d];
    }
    list[0] = 0;
    if (place) place[0] = 0;
    for (int d = 0; d < nd; d++) {
        const int o = ndb_off[d], s = start[o + x[d]], c = count[o + x[d]];
        for (int e = n - 1; e >= 0; e--) { /* in place, from the end: entry e becomes e*c .. e*c + c - 1 */
            const int base = list[e] * ndb_w[d] + s, pb = place ? place[e] : 0;
            for (int m = c - 1; m >= 0; m--) {
                const int y = s + m * ndb_dil[d]; /* (a query's coordinate, with place) */
                list[e * c + m] = base + m * ndb_dil[d];
                if (place) place[e * c + m] = pb * ndb_kn[o + y] + (x[d] - ndb_ks[o + y]) / ndb_dil[d];
            }
        }
        n *= c;
    }
    return n;
}
