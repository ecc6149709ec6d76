-- A mask_mod/score_mod kernel (docs/masks.md): a causal sliding window of 128
-- keys with Gemma 2's soft-capping, at a shape whose tiles are empty, partial
-- and full, so the block tables and the predicate's loops show in review.
return { name = "swa_softcap", heads = 4, heads_kv = 2, lq = 520, dk = 32, fuse = "none",
  mask = { kind = "sliding_window", left = 127, right = 0 }, score_mod = { kind = "softcap", c = 30 } }
