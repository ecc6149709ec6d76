-- tune target: the seed's fused attention (mean over queries), H=8 L=4096 D=64
return { name = "t_fused_mean", heads = 8, lq = 4096, dk = 64, fuse = "mean" }
