-- tests/test_dtype.c: standard attention with 17 queries (flash), converting
-- bf16 tiles as it packs them (vdpbf16ps on bf16 pairs where the build has
-- AVX-512 BF16; odd dk: a lone last element) and rounding out with f16_bits
return { name = "dt_bf16_flash", lq = 17, dk = 5, fuse = "none", dtype = "bf16", out_dtype = "f16" }
