-- The partner of gqa_h8kv2_4096.lua: the same problem with one K/V head per
-- query head (heads_kv = heads; std_4096's problem, timed beside its GQA
-- form with the same options).
return {
  name = "gqa_h8kv8_4096", heads = 8, heads_kv = 8,
  lq = 4096, lk = 4096, dk = 64, dv = 64,
  fuse = "none",
}
