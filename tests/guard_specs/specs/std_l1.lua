-- One query, one key: every tile is mostly empty.
return { name = "g_std_l1", lq = 1, dk = 3, dv = 5, fuse = "none" }
