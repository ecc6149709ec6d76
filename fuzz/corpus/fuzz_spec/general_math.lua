local d = 16
return { name = "gen_" .. d, lq = d * 2, dk = d, score = { kind = "general" }, scale = 1 / math.sqrt(d), norm = { kind = "softmax" } }