-- The backward of causal attention (issue 40: ≥ 1.8× faster than the
-- non-causal backward), lse from the forward, --pass backward in make bench.
return { name = "bwd_causal_4096", heads = 8, lq = 4096, dk = 64, fuse = "none", mask = "causal", lse = true,
  backward = true }
