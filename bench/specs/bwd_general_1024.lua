-- The backward of the general score (s = scale · qᵀ W k, W per head) at a
-- small size: H=8 L=1024 D=64, softmax, lse from the forward. bench/ab/run.sh
-- with BACKWARD=1 times it (W random, dW compared too; docs/backward.md).
return { name = "bwd_general_1024", heads = 8, lq = 1024, dk = 64, score = "general", fuse = "none", lse = true,
  backward = true }
