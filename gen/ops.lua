-- ops.lua — the operator's axes as tables: one row per score, norm, fuse
-- and mask, with what the rest of the generator needs to know about it.
-- Adding a function means adding a row here (and its C in templates/).

local M = {}

-- score rows:
--   family   "dot": S = Q'·K'ᵀ after preparing rows (scale, project, normalize)
--            "additive": S = v_aᵀ tanh(W_q q + W_k k), per pair
--   prep_q   how a query row is prepared before the dot product
--   keys     where the key rows come from: "k" or the location weights "w"
--   params   run-time weights in NAME_params, with their shapes (for docs)
M.score = {
  order = { "dot", "scaled_dot", "general", "additive", "cosine", "location" },
  default = "scaled_dot",
  dot        = { c = "HEED_SCORE_DOT", family = "dot", prep_q = "scale", keys = "k",
                 doc = "q·k" },
  scaled_dot = { c = "HEED_SCORE_SCALED_DOT", family = "dot", prep_q = "scale", keys = "k",
                 doc = "q·k × scale (scale defaults to 1/sqrt(dk))" },
  general    = { c = "HEED_SCORE_GENERAL", family = "dot", prep_q = "project", keys = "k",
                 params = { { "w", "[heads][dk][dk]", "W of qᵀ W k" } },
                 doc = "qᵀ W k, W given at run time (Luong)" },
  additive   = { c = "HEED_SCORE_ADDITIVE", family = "additive", prep_q = "scale", keys = "k",
                 params = { { "w_q", "[heads][da][dk]", "W_q" }, { "w_k", "[heads][da][dk]", "W_k" },
                            { "v_a", "[heads][da]", "v" } },
                 doc = "vᵀ tanh(W_q q + W_k k) (Bahdanau); width da" },
  cosine     = { c = "HEED_SCORE_COSINE", family = "dot", prep_q = "normalize", keys = "k",
                 doc = "q·k / (|q||k|) × scale (Graves); 0 for a zero vector" },
  location   = { c = "HEED_SCORE_LOCATION", family = "dot", prep_q = "scale", keys = "w",
                 params = { { "w", "[heads][lk][dk]", "W of S[i,:] = W q_i" } },
                 doc = "S[i,:] = W q_i: depends on the query alone (Luong); k is not read" },
}

M.norm = {
  order = { "softmax", "sigmoid", "relu", "none" },
  default = "softmax",
  softmax = { c = "HEED_NORM_SOFTMAX", doc = "over the allowed keys of a row; an empty row gives 0" },
  -- Exactly 0 below s = -88, where e^-s nears float's top (so sigmoid(-inf)
  -- = 0, as the reference, and the division never sees inf: -ffast-math
  -- divides with a reciprocal estimate whose Newton step turns 1/inf into
  -- NaN); NaN fails the test and stays NaN.
  sigmoid = { c = "HEED_NORM_SIGMOID", expr = "((s) < -88.0f ? 0.0f : 1.0f / (1.0f + expf(-(s))))",
              doc = "elementwise 1/(1+e^-s)" },
  relu    = { c = "HEED_NORM_RELU", expr = "((s) > 0.0f ? (s) : 0.0f)", doc = "elementwise max(s, 0)" },
  none    = { c = "HEED_NORM_NONE", expr = "(s)", doc = "identity (linear attention)", signed = true },
}

M.fuse = {
  order = { "none", "mean", "sum", "max" },
  default = "mean",
  none = { c = "HEED_FUSE_NONE", doc = "standard attention: Lq outputs" },
  mean = { c = "HEED_FUSE_MEAN", linear = true, doc = "α_j = mean over queries of P[i,j]" },
  sum  = { c = "HEED_FUSE_SUM", linear = true, doc = "α_j = sum over queries of P[i,j]" },
  max  = { c = "HEED_FUSE_MAX", doc = "α_j = max over queries of P[i,j] (masked P count as 0)" },
}

M.mask = {
  order = { "none", "causal", "local" },
  default = "none",
  none   = { c = "HEED_MASK_NONE", doc = "every key" },
  causal = { c = "HEED_MASK_CAUSAL", doc = "key j allowed iff j <= i + (lk - lq)" },
  ["local"] = { c = "HEED_MASK_LOCAL", doc = "|j - c(i)| <= radius; gaussian = true weights P by exp(-(j-c)^2/2σ²), σ = radius/2",
                fields = { radius = "integer >= 0 (required)", gaussian = "boolean (default false)" } },
}

return M
