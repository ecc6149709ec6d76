-- tune target: local window of radius 32, standard attention, H=4 L=4096 D=64
return { name = "t_local32", heads = 4, lq = 4096, dk = 64, fuse = "none", mask = { kind = "local", radius = 32 } }
