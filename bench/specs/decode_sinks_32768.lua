-- Issue 39 / 43: attention sinks (StreamingLLM) in decode: one query of 32
-- heads sharing 8 K/V heads against a cache of 32768 keys, D = 128, f16
-- storage, sinks n = 4 and a window of 1024 (the query is the last token:
-- gen/patterns.lua). The decode method reads the 4 + 1024 keys the mask
-- allows and no other (gen/blocks.lua key_ranges); GB/s and % triad count
-- those bytes (spec.bytes), FLOPs the allowed pairs. Compare with
-- decode_h32kv8_d128_32768_f16 (every key).
return {
  name = "decode_sinks_32768", heads = 32, heads_kv = 8,
  lq = 1, lk = 32768, dk = 128, dv = 128,
  fuse = "none", dtype = "f16", out_dtype = "f16",
  mask = { kind = "sinks", n = 4, window = 1024 },
}
