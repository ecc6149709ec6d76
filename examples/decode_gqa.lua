-- One decoding step of a language model with grouped-query attention: 32
-- query heads share 8 key/value heads (4 query heads per K/V head), one new
-- token attends to a 4096-token cache. The keys are split in chunks
-- (schedule parameter ksplit) and merged in a fixed order, so the result is
-- the same bits on any number of threads.
return {
  name = "decode_gqa",
  heads = 32, heads_kv = 8,
  lq = 1, lk = 4096, dk = 128, dv = 128,
  fuse = "none",
}
