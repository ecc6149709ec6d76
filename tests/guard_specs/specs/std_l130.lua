-- L = 130 (two past a tile of 128), full vectors of dk = 64 and dv = 40.
return { name = "g_std_l130", lq = 130, dk = 64, dv = 40, fuse = "none" }
