-- tune target: standard attention, H=8 L=1024 D=64
return { name = "t_standard", heads = 8, lq = 1024, dk = 64, fuse = "none" }
