-- The backward of the general score (s = scale · qᵀ W k, W per head) at a
-- small size: H=8 L=1024 D=64, softmax, lse recomputed (bench/ab's forward
-- signature takes no lse). BACKWARD=1 bench/ab/run.sh times it (W random,
-- dW compared too; docs/backward.md "The general score on the tiles").
return { name = "bwd_general_1024", heads = 8, lq = 1024, dk = 64, score = "general", fuse = "none",
  backward = true }
