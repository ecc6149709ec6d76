-- tests/test_dtype.c: a standard kernel converting bf16 tiles as it packs them
-- (vdpbf16ps on bf16 pairs where the build has AVX-512 BF16; odd dk: a lone
-- last element) and rounding out with f16_bits
return { name = "dt_bf16_in", lq = 3, dk = 5, fuse = "none", dtype = "bf16", out_dtype = "f16" }
