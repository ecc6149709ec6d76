local t = {}
for i = 1, 1e7 do t[i] = { i } end
return { name = "x", lq = 1, dk = 1 }
