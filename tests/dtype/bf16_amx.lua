-- tests/test_dtype.c: standard attention (flash) with bf16 q, k, v and an
-- even dk, so where the build has AMX its Q·Kᵀ runs on tile registers
-- (templates/amx.c): 40 columns (a whole 32-column step and a remainder),
-- 37 keys (two whole groups of 16, the last key of k a tile's last row, and
-- a tail for vdpbf16ps); out rounded with f16_bits
return { name = "dt_bf16_amx", lq = 17, lk = 37, dk = 40, dv = 6, fuse = "none", dtype = "bf16", out_dtype = "f16" }
