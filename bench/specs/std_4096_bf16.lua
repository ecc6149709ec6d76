-- std_4096 with bf16 q, k, v and out (the "bf16/f16 storage" issue: prefill
-- beside the f32 kernel of std_4096.lua in the same run)
return {
  name = "std_4096_bf16", heads = 8,
  lq = 4096, lk = 4096, dk = 64, dv = 64,
  fuse = "none", dtype = "bf16", out_dtype = "bf16",
}
