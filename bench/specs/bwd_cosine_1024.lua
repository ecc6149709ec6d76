-- The backward of the cosine score (s = scale · q̂·k̂, x̂ = x / |x|) at a small
-- size: H=8 L=1024 D=64, softmax, lse recomputed (bench/ab's forward
-- signature takes no lse). BACKWARD=1 bench/ab/run.sh times it (docs/backward.md
-- "The cosine score on the tiles").
return { name = "bwd_cosine_1024", heads = 8, lq = 1024, dk = 64, score = "cosine", fuse = "none",
  backward = true }
