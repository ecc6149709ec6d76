-- tune target: causal standard attention, H=4 L=2048 D=128
return { name = "t_causal", heads = 4, lq = 2048, dk = 128, fuse = "none", mask = "causal" }
