-- Issue 39: a causal sliding window of 256 keys (Mistral) as a mask_mod,
-- H=8 L=16384 D=64: at least 65% of the FMA peak on the pairs it allows
-- (spec.flops) and at least 20x faster than the dense causal kernel of the
-- same length (std_causal_16384.lua), read from the two rows by
-- bench/report.lua.
return { name = "swa256_16384", heads = 8, lq = 16384, dk = 64, fuse = "none",
  mask_mod = { kind = "sliding_window", left = 255, right = 0 } }
