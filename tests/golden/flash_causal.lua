-- Golden: standard attention (flash, online softmax) with a causal mask.
return { name = "flash_causal", heads = 2, lq = 37, lk = 37, dk = 16, dv = 16, fuse = "none", mask = "causal" }
