-- tests/test_dtype.c: standard attention with 17 queries (flash), converting
-- f16 tiles as it packs them (widen_f16) and rounding out with bf16_bits
return { name = "dt_f16_flash", lq = 17, dk = 5, fuse = "none", dtype = "f16", out_dtype = "bf16" }
