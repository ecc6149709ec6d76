-- The backward of the fused mean form (issue 40: fused mean L=4096 ≥ 45% of
-- the FMA peak): H=8 L=4096 D=64, softmax; no lse (the fused forms have
-- none). make bench runs it with --pass backward (FLOPs 2.5x the forward's).
return { name = "bwd_fused_mean_4096", heads = 8, lq = 4096, lk = 4096, dk = 64, dv = 64, fuse = "mean",
  backward = true }
