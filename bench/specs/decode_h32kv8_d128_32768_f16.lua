-- One decoding step with grouped K/V heads (the "bf16/f16 storage, grouped
-- K/V heads" issue): 32 query heads share 8 K/V heads, one query over 32768
-- cached keys, D = 128, f16 storage. Memory-bound: read as GB/s against the
-- STREAM triad of the same run (K and V read once: spec.bytes).
return {
  name = "decode_h32kv8_d128_32768_f16", heads = 32, heads_kv = 8,
  lq = 1, lk = 32768, dk = 128, dv = 128,
  fuse = "none", dtype = "f16", out_dtype = "f16",
}
