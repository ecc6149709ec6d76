-- The backward of standard attention (issue 40): H=8 L=4096 D=64, softmax,
-- lse from the forward. make bench runs it with --pass backward against
-- peer_blas's backward composition (bench/peers.c).
return { name = "bwd_std_4096", heads = 8, lq = 4096, dk = 64, fuse = "none", lse = true, backward = true }
