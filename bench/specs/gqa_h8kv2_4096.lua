-- Grouped K/V heads at L = 4096 (the "bf16/f16 storage, grouped K/V heads"
-- issue): 8 query heads over heads_kv = heads/4 = 2 K/V heads, beside
-- gqa_h8kv8_4096.lua (heads_kv = heads): no slower per query head.
return {
  name = "gqa_h8kv2_4096", heads = 8, heads_kv = 2,
  lq = 4096, lk = 4096, dk = 64, dv = 64,
  fuse = "none",
}
