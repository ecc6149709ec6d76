-- tests/test_dtype.c: a standard kernel converting f16 tiles as it packs them
-- (widen_f16) and rounding out with bf16_bits
return { name = "dt_f16_in", lq = 3, dk = 5, fuse = "none", dtype = "f16", out_dtype = "bf16" }
