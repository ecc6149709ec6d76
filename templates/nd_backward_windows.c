/* Per dimension d: its extent, dilation and where its rows of the tables start. */
static const int ndb_w[NDB_NDIM] = { $(NDB_W) }, ndb_dil[NDB_NDIM] = { $(NDB_DIL) }, ndb_off[NDB_NDIM] = { $(NDB_OFF) };
/* Query coordinate x of dimension d sees ndb_kn[o + x] keys from ndb_ks[o + x],
 * ndb_dil[d] apart (o = ndb_off[d]). */
static const int ndb_ks[] = {
> for _, l in ipairs(NDB_KS) do
    $(l)
> end
};
static const int ndb_kn[] = {
> for _, l in ipairs(NDB_KN) do
    $(l)
> end
};
/* Key coordinate y of dimension d is seen by the ndb_qn[o + y] queries from
 * ndb_qs[o + y], ndb_dil[d] apart (those whose window holds y). */
static const int ndb_qs[] = {
> for _, l in ipairs(NDB_QS) do
    $(l)
> end
};
static const int ndb_qn[] = {
> for _, l in ipairs(NDB_QN) do
    $(l)
> end
};
