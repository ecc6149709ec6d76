-- L = 37 queries over 29 keys: tiles end inside the rows.
return { name = "g_std_l37", heads = 3, lq = 37, lk = 29, dk = 9, dv = 17, fuse = "none" }
