-- Issue 39: logit soft-capping (Gemma 2) as a score_mod on causal attention,
-- H=8 L=4096 D=64: at least 90% of the plain causal kernel's speed
-- (std_causal_4096.lua), read by bench/report.lua.
return { name = "softcap_causal_4096", heads = 8, lq = 4096, dk = 64, fuse = "none", mask = "causal",
  score_mod = { kind = "softcap", c = 30 } }
