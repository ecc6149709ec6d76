-- The dense causal kernel at L = 16384: the row swa256_16384's time is
-- compared with (issue 39: what a user without block sparsity runs).
return { name = "std_causal_16384", heads = 8, lq = 16384, dk = 64, fuse = "none", mask = "causal" }
