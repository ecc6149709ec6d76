> if NORM ~= "softmax" then
/* P of scaled score s and, returned, dL/dS for dP = dp. */
static inline float ndb_ds(float s, float dp, float *p)
{
> if NORM == "sigmoid" then
    *p = s < -88.0f ? 0.0f : 1.0f / (1.0f + expf(-s)); /* the forward's sigmoid (gen/ops.lua) */
    return *p * (1.0f - *p) * dp;
> elseif NORM == "relu" then
    *p = s > 0.0f ? s : 0.0f;
    return s > 0.0f ? dp : 0.0f;
> else
    *p = s;
    return dp;
> end
}

> end
